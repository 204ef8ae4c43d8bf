package admin

import (
	"strings"
	"testing"
)

// TestAssets: the dashboard's scripts, stylesheets and uPlot's licence are
// served from the binary with their types; any other name is 404.
func TestAssets(t *testing.T) {
	e := startEnv(t, false)
	tests := []struct {
		name, file, ctype, has string
	}{
		{"uPlot", "uPlot.iife.min.js", "text/javascript", "uPlot"},
		{"uPlot's stylesheet", "uPlot.min.css", "text/css", ".uplot"},
		{"uPlot's licence", "uPlot.LICENSE.txt", "text/plain", "MIT License"},
		{"the charts", "charts.js", "text/javascript", "SwitchyardCharts"},
		{"the fleet's traffic", "fleet.js", "text/javascript", "SwitchyardFleet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", "/assets/"+tc.file, "", nil)
			if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(r.raw), tc.has) {
				t.Fatalf("%s: %d %s, %d bytes", tc.file, r.status, r.header.Get("Content-Type"), len(r.raw))
			}
		})
	}
	for _, name := range []string{"LICENSE", "vendor%2Fuplot%2FLICENSE", "index.html.tmpl", "openapi.json"} {
		if r := e.do("GET", "/assets/"+name, "", nil); r.status != 404 {
			t.Errorf("/assets/%s: %d, want 404", name, r.status)
		}
	}
	page := e.do("GET", "/", "", nil)
	for _, ref := range []string{`src="/assets/uPlot.iife.min.js"`, `href="/assets/uPlot.min.css"`, `src="/assets/charts.js"`, `src="/assets/fleet.js"`} {
		if !strings.Contains(string(page.raw), ref) {
			t.Errorf("the page does not load %s", ref)
		}
	}
}
