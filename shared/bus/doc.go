// Package bus is Switchyard's access to NATS: the connection every service
// opens (Connect) and the in-process server of the all-in-one launcher
// (StartEmbedded). Subjects, event types and bucket setup live here too as
// they are added.
package bus
