// Package bus is Switchyard's access to NATS: the connection every service
// opens (Connect) and the JetStream resources every service shares (Setup:
// the switchyard_holds, switchyard_health, switchyard_leases and
// switchyard_credentials buckets and the SWITCHYARD_EVENTS stream) with
// their subjects (EventSubject). The README's "NATS contracts" section
// documents them for operators and subscribers.
//
// The in-process server of the all-in-one launcher is package natsembed,
// kept apart so that the service binaries, which only connect, do not link
// nats-server.
package bus
