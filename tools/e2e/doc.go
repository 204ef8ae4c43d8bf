// Package e2e holds tests that run the services together: proxies and
// probers in one process on one embedded NATS server, in front of fake
// providers. It has no code of its own.
package e2e
