package bus

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Unavailable reports whether err means NATS or JetStream did not answer
// (as opposed to answering no): a timeout, no responders, a connection
// closed, draining or reconnecting, JetStream not enabled, or a server
// error (5xx).
func Unavailable(err error) bool {
	for _, target := range []error{
		context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		nats.ErrConnectionClosed, nats.ErrConnectionDraining, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, nats.ErrJetStreamNotEnabled, nats.ErrBadSubscription,
		jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code >= 500
}

// WrongLastSequence reports whether err is JetStream's "wrong last
// sequence" (10071, or 10164 on replicated streams): a compare-and-set
// that lost.
func WrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
