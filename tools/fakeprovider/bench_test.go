package fakeprovider

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func BenchmarkChat(b *testing.B) {
	for _, bm := range []struct {
		name string
		body string
	}{
		{"non-stream", chatBody("gpt-4o-mini", false, false)},
		{"stream", chatBody("gpt-4o-mini", true, true)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			s, err := Start(Options{Name: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			url := s.URL() + "/v1/chat/completions"
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Post(url, "application/json", strings.NewReader(bm.body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			b.StopTimer()
			s.ResetCalls()
		})
	}
}
