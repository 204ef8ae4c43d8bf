package bus

import (
	"sync"
	"sync/atomic"
)

// Binding is what a store works on once the fleet's buckets exist: the
// services make their stores in New, before Setup has answered, and bind
// them when it has (fleet.Member's bind). It is the one "unbound store,
// bind later" shape: a store keeps a Binding of its bucket (and whatever
// comes with it), its constructor makes it unbound, its Bind method sets
// it through Bind, every operation reads it with Load (nil: not bound
// yet, fail fast) and its Bound method returns Bound.
//
// The zero value is unbound and ready to use. Only the first Bind counts;
// Load never blocks.
type Binding[T any] struct {
	init  sync.Once
	mu    sync.Mutex
	v     atomic.Pointer[T]
	bound chan struct{}
}

func (b *Binding[T]) ch() chan struct{} {
	b.init.Do(func() { b.bound = make(chan struct{}) })
	return b.bound
}

// Bind sets v, closes Bound and reports true, unless a value is set
// already (then it changes nothing and reports false). A nil v binds
// nothing.
func (b *Binding[T]) Bind(v *T) bool {
	if v == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.v.Load() != nil {
		return false
	}
	b.v.Store(v)
	close(b.ch())
	return true
}

// Load returns the bound value, nil until Bind.
func (b *Binding[T]) Load() *T { return b.v.Load() }

// Bound is closed once a value is bound.
func (b *Binding[T]) Bound() <-chan struct{} { return b.ch() }
