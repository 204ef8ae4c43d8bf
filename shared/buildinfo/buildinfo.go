// Package buildinfo says which build a binary is: its version and commit,
// for every binary's -version (and swctl version).
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Set at link time by the Makefile's build (-ldflags "-X ..."); empty,
// they are read from the build information Go records (the module's
// version, the VCS revision of a build in a Git checkout).
var (
	version string
	commit  string
)

// Version describes the build: "<version> (commit <commit>[, modified], <time>)",
// from the -ldflags values, else from runtime/debug.ReadBuildInfo
// ("(devel)" and "unknown" when Go recorded none, as under go run).
func Version() string {
	v, c, extra := version, commit, []string(nil)
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if c == "" {
					c = s.Value
				}
			case "vcs.modified":
				if s.Value == "true" && commit == "" {
					extra = append(extra, "modified")
				}
			case "vcs.time":
				if commit == "" {
					extra = append(extra, s.Value)
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if c == "" {
		c = "unknown"
	}
	return v + " (" + strings.Join(append([]string{"commit " + c}, extra...), ", ") + ")"
}
