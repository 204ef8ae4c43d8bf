package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printEvent prints one event of /admin/events as a line of the events
// tail table (or as it came, with --json). Hold, release, trip, probe and
// credential events name a scope; a health event names its provider and
// key at the top level and says how the status moved (previous → status);
// a budget event names a client key and its plan; a config event the
// version activated.
func printEvent(tw *tabwriter.Writer, stdout io.Writer, asJSON bool, kind, data string) error {
	if asJSON {
		_, err := fmt.Fprintln(stdout, data)
		return err
	}
	var ev struct {
		At    time.Time `json:"at"`
		Scope struct {
			Provider string `json:"provider"`
			Key      string `json:"key"`
			Model    string `json:"model"`
		} `json:"scope"`
		Class   string `json:"class"`
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
		Client  string `json:"client"`
		Plan    string `json:"plan"`
		// health events
		Provider string `json:"provider"`
		Key      string `json:"key"`
		Status   string `json:"status"`
		Previous string `json:"previous"`
		Code     string `json:"code"`
		// config events
		Version uint64 `json:"version"`
		Source  string `json:"source"`
		By      string `json:"by"`
		Comment string `json:"comment"`
		Edit    string `json:"edit"`
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return fmt.Errorf("events tail: decode: %w", err)
	}
	if kind == "health" { // provider and key at the top level, no scope
		ev.Scope.Provider, ev.Scope.Key = ev.Provider, ev.Key
		ev.Outcome = ev.Status
		if ev.Previous != "" && ev.Previous != ev.Status {
			ev.Outcome = ev.Previous + " → " + ev.Status
		}
		if ev.Code != "" {
			ev.Reason = strings.TrimSpace(ev.Reason + " (" + ev.Code + ")")
		}
	}
	target := ev.Scope.Provider
	if kind == "budget" { // a budget event names a client key and its plan
		target = ev.Client + " (plan " + ev.Plan + ")"
	}
	for _, s := range []string{ev.Scope.Key, ev.Scope.Model} {
		if s != "" {
			target += "/" + s
		}
	}
	class := ev.Class
	if class == "unrecognised" && kind == "credential" || kind == "budget" {
		class = ""
	}
	if kind == "config" { // a config event names the version activated
		target, ev.Outcome = fmt.Sprintf("version %d", ev.Version), ev.Source
		ev.Reason = strings.TrimSpace("by " + ev.By + " " + strings.TrimSpace(ev.Edit+" "+ev.Comment))
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ev.At.Local().Format("15:04:05.000"), kind, target, dash(class), dash(ev.Outcome), ev.Reason)
	return tw.Flush()
}
