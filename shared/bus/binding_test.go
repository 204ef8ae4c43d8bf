package bus

import (
	"sync"
	"sync/atomic"
	"testing"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestBinding: the zero value is unbound; the first Bind sets the value
// and closes Bound; later ones (and a nil one) change nothing.
func TestBinding(t *testing.T) {
	var b Binding[string]
	if b.Load() != nil || isClosed(b.Bound()) {
		t.Fatal("zero Binding is bound")
	}
	if b.Bind(nil) || isClosed(b.Bound()) {
		t.Fatal("Bind(nil) bound")
	}
	first, second := "first", "second"
	if !b.Bind(&first) {
		t.Fatal("first Bind reported false")
	}
	if !isClosed(b.Bound()) {
		t.Fatal("Bound not closed after Bind")
	}
	if b.Bind(&second) {
		t.Fatal("second Bind reported true")
	}
	if got := b.Load(); got != &first {
		t.Fatalf("Load = %q, want the first value", *got)
	}
}

// TestBindingConcurrent: of many concurrent Binds exactly one wins, and
// a waiter on Bound sees its value.
func TestBindingConcurrent(t *testing.T) {
	var b Binding[int]
	var seen atomic.Pointer[int]
	waiter := make(chan struct{})
	go func() {
		defer close(waiter)
		<-b.Bound()
		seen.Store(b.Load())
	}()
	var wins atomic.Int32
	var winner atomic.Pointer[int]
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			v := i
			if b.Bind(&v) {
				wins.Add(1)
				winner.Store(&v)
			}
		})
	}
	wg.Wait()
	<-waiter
	if wins.Load() != 1 {
		t.Fatalf("%d Binds won, want 1", wins.Load())
	}
	if seen.Load() != winner.Load() || b.Load() != winner.Load() {
		t.Fatal("the value seen is not the winner's")
	}
}
