package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
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
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.name, p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), p.env...)
	// Its own process group, so that a test's Ctrl-C does not reach it
	// before the test can stop it, and a kill reaches its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		out.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(within)
	for {
		err := ready()
		if err == nil {
			return
		}
		select {
		case <-done:
			p.t.Fatalf("%s exited during start-up: %v\n%s", p.name, err, tail(p.log))
		default:
		}
		if time.Now().After(deadline) {
			p.signal(syscall.SIGKILL)
			p.t.Fatalf("%s not ready after %v: %v\n%s", p.name, within, err, tail(p.log))
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
