package testkit

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// Postgres is a throwaway PostgreSQL cluster of one test: initdb'd in a
// temporary directory, listening on 127.0.0.1 on a free port (no unix
// socket), password authentication (scram-sha-256) for user postgres.
type Postgres struct {
	tb  testing.TB
	bin string // directory of initdb and pg_ctl
	dir string // the cluster's data directory
	// as runs a command as the cluster's owner: nothing, or
	// "runuser -u nobody --" when the test runs as root (initdb and
	// postgres refuse to run as root).
	as       []string
	uid, gid int // nobody's, with as
	// URL is the database postgres without the password.
	URL string
	// Password is user postgres's password.
	Password string
}

// postgresBinDirs are where PostgreSQL's programs are looked for after
// PATH: Debian's and Ubuntu's packages keep them out of it.
func postgresBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.Reverse(dirs) // the newest first
	return dirs
}

// StartPostgres initdb's and starts a cluster, stopped and removed when
// the test ends. Without initdb and pg_ctl the test is skipped, saying how
// to install them (failed instead with CI=true: see MissingTool).
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	bin := ""
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			bin = filepath.Dir(p)
			if r, err := filepath.EvalSymlinks(p); err == nil {
				bin = filepath.Dir(r)
			}
		}
	}
	for _, d := range postgresBinDirs() {
		if bin != "" {
			break
		}
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			bin = d
		}
	}
	if bin == "" {
		MissingTool(tb, "PostgreSQL's initdb and pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin; "+
			"install them with `apt-get install postgresql` (.ci/run does) to run this test")
		return nil
	}
	p := &Postgres{tb: tb, bin: bin}
	top := tb.TempDir()
	p.dir = filepath.Join(top, "data")
	if os.Getuid() == 0 {
		p.asNobody(top)
	}
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	p.Password = hex.EncodeToString(pw)
	pwfile := filepath.Join(top, "pw")
	p.writeFile(pwfile, p.Password+"\n")
	p.run("initdb", "-D", p.dir, "-U", "postgres", "--pwfile", pwfile, "-A", "scram-sha-256",
		"-E", "UTF8", "--locale=C", "--no-sync")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	f, err := os.OpenFile(filepath.Join(p.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = fmt.Fprintf(f, "\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = ''\nmax_connections = 20\n", port)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatal(err)
	}
	p.URL = "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable"
	p.Start()
	tb.Cleanup(func() { p.stop(false) })
	return p
}

// asNobody makes the cluster's files user nobody's and runs PostgreSQL's
// programs as nobody: initdb refuses to run as root.
func (p *Postgres) asNobody(top string) {
	u, err := user.Lookup("nobody")
	if err != nil {
		p.tb.Fatalf("running as root, PostgreSQL needs another user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	p.uid, p.gid = uid, gid
	// nobody must reach top: its parent is the test's own 0700 directory
	for _, d := range []string{filepath.Dir(top), top} {
		if err := os.Chmod(d, 0o755); err != nil {
			p.tb.Fatal(err)
		}
	}
	if err := os.Chown(top, uid, gid); err != nil {
		p.tb.Fatal(err)
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		p.tb.Fatalf("running as root, PostgreSQL runs as nobody through runuser (util-linux): %v", err)
	}
	p.as = []string{runuser, "-u", "nobody", "--"}
}

func (p *Postgres) writeFile(path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		p.tb.Fatal(err)
	}
	if p.as != nil {
		if err := os.Chown(path, p.uid, p.gid); err != nil {
			p.tb.Fatal(err)
		}
	}
}

// run runs PostgreSQL program name as the cluster's owner; a failure
// fails the test with its output.
func (p *Postgres) run(name string, args ...string) {
	p.tb.Helper()
	argv := append(slices.Clone(p.as), append([]string{filepath.Join(p.bin, name)}, args...)...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		p.tb.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// Start starts the cluster (again) and waits until it accepts
// connections.
func (p *Postgres) Start() {
	p.tb.Helper()
	p.run("pg_ctl", "start", "-w", "-t", "60", "-D", p.dir, "-l", filepath.Join(p.dir, "log"))
}

// Stop stops the cluster (fast: connections are cut) and waits until it
// has.
func (p *Postgres) Stop() {
	p.tb.Helper()
	p.stop(true)
}

func (p *Postgres) stop(must bool) {
	argv := append(slices.Clone(p.as), filepath.Join(p.bin, "pg_ctl"), "stop", "-w", "-m", "fast", "-D", p.dir)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil && must {
		p.tb.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}
