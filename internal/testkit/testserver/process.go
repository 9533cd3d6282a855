package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// process is a child server process that can be stopped and started again
// with the same command line.
type process struct {
	t    testing.TB
	name string
	args []string
	env  []string
	log  string // file that receives the process's output
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs the process; ready is polled until it returns nil or the
// deadline passes.
func (p *process) start(ready func() error, within time.Duration) {
	p.t.Helper()
	if err := p.tryStart(ready, within); err != nil {
		p.t.Fatal(err)
	}
}

// errExited is returned by tryStart when the process exited during
// start-up; the log tells why.
type errExited struct {
	name, log string
	err       error
}

func (e *errExited) Error() string {
	return fmt.Sprintf("%s exited during start-up: %v\n%s", e.name, e.err, tail(e.log))
}

// portTaken reports whether the process exited because its port was taken:
// FreePort's port can be grabbed by another process before the server binds
// it, most often when test packages run in parallel.
func (e *errExited) portTaken() bool {
	b, _ := os.ReadFile(e.log)
	s := strings.ToLower(string(b))
	return strings.Contains(s, "address in use") || strings.Contains(s, "address already in use")
}

// startOnFreePorts calls configure, which picks fresh ports, and starts the
// process, up to three times while it fails because a port was taken.
func (p *process) startOnFreePorts(configure func(), ready func() error, within time.Duration) {
	p.t.Helper()
	for attempt := 1; ; attempt++ {
		configure()
		err := p.tryStart(ready, within)
		if err == nil {
			return
		}
		var exited *errExited
		if attempt == 3 || !errors.As(err, &exited) || !exited.portTaken() {
			p.t.Fatal(err)
		}
		os.Remove(p.log) // the next attempt's log stands alone
	}
}

// tryStart is start that returns its error.
func (p *process) tryStart(ready func() error, within time.Duration) error {
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.name, p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), p.env...)
	// Its own process group, so that a test's Ctrl-C does not reach it
	// before the test can stop it, and a kill reaches its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		out.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(poll.Scaled(within))
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return &errExited{name: p.name, log: p.log, err: err}
		default:
		}
		if time.Now().After(deadline) {
			p.signal(syscall.SIGKILL)
			return fmt.Errorf("%s not ready after %v: %v\n%s", p.name, within, err, tail(p.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether the process has been started and not yet exited.
func (p *process) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process group and waits for the process to exit
// (after 10 s it is killed).
func (p *process) signal(sig syscall.Signal) {
	if !p.running() {
		return
	}
	syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail returns the end of a log file, for failure messages.
func tail(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
