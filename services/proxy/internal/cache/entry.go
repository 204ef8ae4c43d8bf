package cache

import (
	"container/list"
	"sync"
	"time"

	"switchyard.dev/shared/answercache"
)

// Entry is one cached answer (answercache.Entry: the bucket's contract).
type Entry = answercache.Entry

// SchemaVersion is the version of an Entry's JSON form.
const SchemaVersion = answercache.SchemaVersion

// Memory is a proxy's bounded memory of entries: the newest used kept
// within max bytes (of their answers), the least recently used dropped.
// Safe for concurrent use.
type Memory struct {
	mu    sync.Mutex
	max   int64
	size  int64
	ll    *list.List // front: most recently used
	items map[string]*list.Element
}

type memItem struct {
	key string
	e   *Entry
}

// NewMemory returns a Memory of at most max bytes.
func NewMemory(max int64) *Memory {
	return &Memory{max: max, ll: list.New(), items: map[string]*list.Element{}}
}

// Get returns the live entry of key (false: none, or expired, then
// forgotten).
func (m *Memory) Get(key string, now time.Time) (*Entry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.items[key]
	if !ok {
		return nil, false
	}
	it := el.Value.(*memItem)
	if !it.e.Live(now) {
		m.remove(el)
		return nil, false
	}
	m.ll.MoveToFront(el)
	return it.e, true
}

// Put keeps e under key (an entry larger than the whole memory is not
// kept).
func (m *Memory) Put(key string, e *Entry) {
	n := int64(e.Size())
	if n > m.max {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		m.remove(el)
	}
	m.items[key] = m.ll.PushFront(&memItem{key: key, e: e})
	m.size += n
	for m.size > m.max {
		m.remove(m.ll.Back())
	}
}

// Remove forgets key.
func (m *Memory) Remove(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		m.remove(el)
	}
}

// Bytes is the size of the answers kept.
func (m *Memory) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.size
}

func (m *Memory) remove(el *list.Element) {
	it := el.Value.(*memItem)
	m.ll.Remove(el)
	delete(m.items, it.key)
	m.size -= int64(it.e.Size())
}
