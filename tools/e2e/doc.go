// Package e2e holds tests that run the services together: proxies and
// probers in one process on one embedded NATS server, in front of fake
// providers, and, where a test needs real processes (a nats-server killed
// with SIGKILL, a fleet of proxy commands), the commands built by the
// tests (buildBinary). It has no code of its own.
package e2e
