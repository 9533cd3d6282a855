package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mdBlock is one fenced code block of a Markdown file.
type mdBlock struct {
	file    string // the file it is in, such as "docs/api.md"
	line    int    // the line of its opening fence, from 1
	section string // the heading (#, ## or ###) it is under
	lang    string // the fence's info string, such as "sh"
	text    string // its lines, without the fences and the fence's indentation
}

// first is the block's first line.
func (b mdBlock) first() string { first, _, _ := strings.Cut(b.text, "\n"); return first }

var fence = regexp.MustCompile("^( *)```([A-Za-z]*)\\s*$")

// parseBlocks returns the fenced code blocks of a Markdown text, the
// file named file, and the text with each block's lines blanked (for
// finding inline code).
func parseBlocks(file, md string) (blocks []mdBlock, prose string) {
	lines := strings.Split(md, "\n")
	var section string
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ") {
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
		m := fence.FindStringSubmatch(line)
		if m == nil {
			out = append(out, line)
			continue
		}
		b := mdBlock{file: file, line: i + 1, section: section, lang: m[2]}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], m[1]))
		}
		b.text = strings.Join(body, "\n")
		blocks = append(blocks, b)
		out = append(out, "")
	}
	return blocks, strings.Join(out, "\n")
}

// step is one command of a shell block, with what README shows of it.
type step struct {
	file    string // the Markdown file it is in
	line    int    // its first line there
	command string // the shell text, continuation lines and here-documents included
	// comment is the command's trailing comment, on its last line.
	comment string
	// answer is the shown answer: the "# {…" comment lines after the
	// command, each without its "#" and the white space around it, joined.
	answer string
}

var heredoc = regexp.MustCompile(`^<<-?\s*'?([A-Za-z_]+)'?`)

// scanShell scans one line of shell that starts in the quote q (0, ' or
// "): it returns the quote the line ends in, the terminator of a
// here-document it opens, and its comment (after a # that begins a word
// outside quotes; "" if none).
func scanShell(line string, q byte) (quote byte, heredocEnd, comment string) {
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case q == '\'':
			if c == '\'' {
				q = 0
			}
		case q == '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				q = 0
			}
		case c == '\\':
			i++
		case c == '\'' || c == '"':
			q = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return 0, heredocEnd, strings.TrimSpace(line[i+1:])
		case c == '<':
			if m := heredoc.FindStringSubmatch(line[i:]); m != nil {
				heredocEnd = m[1]
				i += len(m[0]) - 1
			}
		}
	}
	return q, heredocEnd, ""
}

// parseSteps splits a shell block into its commands: a command goes on
// while a quote is open or its line ends in a backslash, takes in the
// here-document it opens, and is followed by its shown answer, if any. A
// comment line that is not an answer is skipped; an answer with no command
// before it is an error.
func parseSteps(b mdBlock) ([]step, error) {
	lines := strings.Split(b.text, "\n")
	var steps []step
	for i := 0; i < len(lines); {
		trimmed := strings.TrimSpace(lines[i])
		switch {
		case trimmed == "":
			i++
			continue
		case strings.HasPrefix(trimmed, "# {"):
			return nil, fmt.Errorf("%s:%d: an answer with no command before it", b.file, b.line+1+i)
		case strings.HasPrefix(trimmed, "#"):
			i++
			continue
		}
		s := step{file: b.file, line: b.line + 1 + i}
		var cmd []string
		var q byte
		var end string
		for i < len(lines) {
			line := lines[i]
			cmd = append(cmd, line)
			i++
			var hd, comment string
			q, hd, comment = scanShell(line, q)
			if hd != "" {
				end = hd
			}
			s.comment = comment
			if q == 0 && (comment != "" || !strings.HasSuffix(line, "\\")) {
				break
			}
		}
		if q != 0 {
			return nil, fmt.Errorf("%s:%d: a quote left open", s.file, s.line)
		}
		if end != "" {
			for ; i < len(lines); i++ {
				cmd = append(cmd, lines[i])
				if strings.TrimSpace(lines[i]) == end {
					i++
					break
				}
			}
		}
		s.command = strings.Join(cmd, "\n")
		if i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "# {") {
			var answer []string
			for ; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "#"); i++ {
				answer = append(answer, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[i]), "#")))
			}
			s.answer = strings.Join(answer, "")
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// compactOutput is what a command printed, as its shown answer is written:
// each line trimmed, a line of JSON in its compact form (servers differ in
// the white space they write), the lines joined.
func compactOutput(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		var c bytes.Buffer
		if json.Valid([]byte(line)) && json.Compact(&c, []byte(line)) == nil {
			line = c.String()
		}
		b.WriteString(line)
	}
	return b.String()
}

// answerMatches reports whether a command's output is its shown answer,
// where "…" stands for any text.
func answerMatches(answer, output string) bool {
	parts := strings.Split(answer, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("(?s)^" + strings.Join(parts, ".*") + "$").MatchString(compactOutput(output))
}

// shell is one long-lived bash, as a user's terminal: the variables one
// command sets are there for the next. It runs in a process group of its
// own, so that what README starts in the background stops with it.
type shell struct {
	t      *testing.T
	dir    string // where each command's file and the log of its standard error go
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	marker string
	n      int
}

// startShell starts bash in dir with environment env.
func startShell(t *testing.T, dir string, env []string) *shell {
	t.Helper()
	nonce := make([]byte, 8)
	rand.Read(nonce)
	sh := &shell{t: t, dir: t.TempDir(), lines: make(chan string, 1024), marker: "@@step-done-" + hex.EncodeToString(nonce) + "@@"}
	sh.cmd = exec.Command("bash", "--noprofile", "--norc")
	sh.cmd.Dir, sh.cmd.Env = dir, env
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if sh.stdin, err = sh.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				sh.lines <- line
			}
			if err != nil {
				close(sh.lines)
				return
			}
		}
	}()
	t.Cleanup(sh.stop)
	return sh
}

// stop ends the shell and everything it started: SIGTERM to its process
// group, SIGKILL to what is left after 5 s.
func (sh *shell) stop() {
	pgid := sh.cmd.Process.Pid
	sh.stdin.Close()
	syscall.Kill(-pgid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { sh.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-done
}

// stderrLog is where the shell's commands write their standard error.
func (sh *shell) stderrLog() string { return filepath.Join(sh.dir, "stderr.log") }

// run runs command in the shell, with standard input from /dev/null, and
// returns its standard output and exit status. It fails t if the command
// does not finish within timeout or ends the shell.
func (sh *shell) run(command string, timeout time.Duration) (string, int) {
	sh.t.Helper()
	sh.n++
	file := filepath.Join(sh.dir, fmt.Sprintf("step-%03d.sh", sh.n))
	if err := os.WriteFile(file, []byte(command+"\n"), 0o644); err != nil {
		sh.t.Fatal(err)
	}
	fmt.Fprintf(sh.stdin, "source %s </dev/null 2>>%s; printf '\\n%s %%d\\n' $?\n", file, sh.stderrLog(), sh.marker)
	var out strings.Builder
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-sh.lines:
			if !ok {
				sh.t.Fatalf("the shell ended during:\n%s\noutput: %s\nstandard error: %s", command, out.String(), tailFile(sh.stderrLog()))
			}
			if rest, found := strings.CutPrefix(line, sh.marker+" "); found {
				rc, _ := strconv.Atoi(strings.TrimSpace(rest))
				return strings.TrimSuffix(out.String(), "\n"), rc
			}
			out.WriteString(line)
		case <-deadline:
			sh.t.Fatalf("not done after %v:\n%s\noutput so far: %s\nstandard error: %s", timeout, command, out.String(), tailFile(sh.stderrLog()))
		}
	}
}

// tailFile is the last 4 KiB of a file.
func tailFile(file string) string {
	raw, _ := os.ReadFile(file)
	if len(raw) > 4096 {
		raw = raw[len(raw)-4096:]
	}
	return string(raw)
}

// shellWords splits a command line into words as the shell would, for
// the simple words of helm's command lines (quotes and backslashes, no
// expansions).
func shellWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var q byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case q != 0 && c == q:
			q = 0
		case q != 0:
			w.WriteByte(c)
		case c == '\'' || c == '"':
			q, inWord = c, true
		case c == '\\' && i+1 < len(line):
			i++
			if line[i] != '\n' {
				w.WriteByte(line[i])
				inWord = true
			}
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '$' || c == '`' || c == '*' || c == '?':
			return nil, fmt.Errorf("%q: expansions are not taken", line)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if q != 0 {
		return nil, fmt.Errorf("%q: a quote left open", line)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}
