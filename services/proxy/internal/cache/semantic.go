package cache

import (
	"math"
	"strings"
	"sync"
	"time"
)

var (
	timeNow = time.Now
	sqrt    = math.Sqrt
)

// maxSemantic bounds the entries a proxy indexes by embedding: beyond it
// the oldest indexed go.
const maxSemantic = 10000

// semIndex finds, among the entries of a route and scope, the one whose
// question's embedding is nearest a new question's: by brute force, the
// vectors being unit length (cosine similarity = dot product).
type semIndex struct {
	mu    sync.Mutex
	items []semItem // oldest first
}

type semItem struct {
	key, endpoint string
	vec           []float32
}

func (x *semIndex) add(key, endpoint string, vec []float32) {
	if len(vec) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range x.items {
		if x.items[i].key == key {
			x.items[i].vec, x.items[i].endpoint = vec, endpoint
			return
		}
	}
	if len(x.items) >= maxSemantic {
		x.items = append(x.items[:0], x.items[1:]...)
	}
	x.items = append(x.items, semItem{key: key, endpoint: endpoint, vec: vec})
}

func (x *semIndex) remove(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range x.items {
		if x.items[i].key == key {
			x.items = append(x.items[:i], x.items[i+1:]...)
			return
		}
	}
}

// nearest is the key of endpoint's entries under prefix whose vector is
// nearest vec, with its similarity ("" when none has vec's length).
func (x *semIndex) nearest(prefix, endpoint string, vec []float32) (string, float64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	best, bestSim := "", -2.0
	for _, it := range x.items {
		if len(it.vec) != len(vec) || it.endpoint != endpoint || !strings.HasPrefix(it.key, prefix) {
			continue
		}
		var dot float64
		for i, v := range vec {
			dot += float64(v) * float64(it.vec[i])
		}
		if dot > bestSim {
			best, bestSim = it.key, dot
		}
	}
	return best, bestSim
}

// Nearest returns the live entry of endpoint under prefix (a route's and
// scope's, answercache.KeyPrefix) whose question is nearest vec, when
// their similarity is at least threshold: the entry, the similarity, and
// whether one was found.
func (s *Store) Nearest(prefix, endpoint string, vec []float32, threshold float64) (*Entry, float64, bool) {
	key, sim := s.sem.nearest(prefix, endpoint, Normalize(vec))
	if key == "" || sim < threshold {
		return nil, sim, false
	}
	e, ok := s.mem.Get(key, timeNow())
	if !ok {
		s.sem.remove(key) // expired or dropped from memory
		return nil, sim, false
	}
	return e, sim, true
}

// Normalize scales v to unit length (in place) and returns it.
func Normalize(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n == 0 {
		return v
	}
	n = sqrt(n)
	for i := range v {
		v[i] = float32(float64(v[i]) / n)
	}
	return v
}
