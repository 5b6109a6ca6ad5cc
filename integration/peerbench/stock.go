package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// stockCluster is a PostgreSQL cluster of peerbench's own at initdb's
// stock settings (autovacuum on, synchronous_commit on, shared_buffers
// 128MB, …), started the way herald's internal/testkit.NewPrivatePostgres
// starts the fault suite's: initdb in a temporary directory, pg_ctl on a
// free port, as the OS user postgres when peerbench runs as root (initdb
// refuses root). testkit itself is not imported: its constructor needs a
// testing.TB (and -short), and it would bring kfake and goleak into this
// module.
type stockCluster struct {
	bin, dir, data, version string
	port                    int
	asUser                  string
}

func startStockCluster() (*stockCluster, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "peerbench-pg-")
	if err != nil {
		return nil, err
	}
	p := &stockCluster{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	fail := func(err error) (*stockCluster, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if os.Geteuid() == 0 {
		p.asUser = "postgres"
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root, and there is no OS user postgres to run the cluster as (initdb refuses root): %w", err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	if out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output(); err == nil {
		p.version = strings.TrimSpace(string(out))
	}
	if err := p.run("initdb", "-D", p.data, "-A", "trust", "-U", "postgres", "-E", "UTF8"); err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	p.port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	// Only where to listen; every other setting stays initdb's.
	conf := fmt.Sprintf("\n# peerbench -stock\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n", p.port, dir)
	f, err := os.OpenFile(filepath.Join(p.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	logFile := filepath.Join(dir, "server.log")
	if err := p.run("pg_ctl", "-D", p.data, "-l", logFile, "-w", "-t", "60", "start"); err != nil {
		b, _ := os.ReadFile(logFile)
		return fail(fmt.Errorf("%w\n%s", err, b))
	}
	return p, nil
}

// dsn is base's query parameters (session settings) on the cluster's
// database postgres.
func (p *stockCluster) dsn(base string) string {
	q := url.Values{}
	if u, err := url.Parse(base); err == nil {
		q = u.Query()
	}
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)),
		Path: "/postgres", RawQuery: q.Encode()}
	return u.String()
}

func (p *stockCluster) stop() {
	if err := p.run("pg_ctl", "-D", p.data, "-m", "fast", "-w", "stop"); err != nil {
		if p.run("pg_ctl", "-D", p.data, "status") == nil { // still running
			fmt.Fprintf(os.Stderr, "peerbench: stopping the private cluster: %v (left running in %s)\n", err, p.dir)
			return
		}
	}
	_ = os.RemoveAll(p.dir)
}

func (p *stockCluster) run(tool string, args ...string) error {
	path := filepath.Join(p.bin, tool)
	var cmd *exec.Cmd
	if p.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", p.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, out)
	}
	return nil
}

// postgresBin finds the newest installed PostgreSQL server's bin directory
// (Debian: /usr/lib/postgresql/N/bin), or HERALD_PG_BIN.
func postgresBin() (string, error) {
	if b := os.Getenv("HERALD_PG_BIN"); b != "" {
		if _, err := os.Stat(filepath.Join(b, "initdb")); err != nil {
			return "", fmt.Errorf("HERALD_PG_BIN=%s: no initdb there: %w", b, err)
		}
		return b, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH: install the postgresql package, or set HERALD_PG_BIN")
}
