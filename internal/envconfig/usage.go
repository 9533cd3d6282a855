package envconfig

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
)

// Setting is one variable a configuration struct reads, as its tags say.
type Setting struct {
	Name     string
	Default  string
	Required bool
	// Help says what the setting is, and its bounds.
	Help string
}

// Settings returns the variables of the configuration struct v (a value
// or a pointer), in field order, embedded structs included: the env,
// envDefault and help tags the program parses with. A --help written from
// them cannot drift from what the program reads.
func Settings(v any) []Setting {
	var out []Setting
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			tag, ok := f.Tag.Lookup("env")
			if !ok {
				if f.Anonymous && f.Type.Kind() == reflect.Struct {
					walk(f.Type)
				}
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			out = append(out, Setting{Name: name, Default: f.Tag.Get("envDefault"), Required: strings.Contains(opts, "required"),
				Help: f.Tag.Get("help")})
		}
	}
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	walk(t)
	return out
}

// Usage writes a program's usage: its commands (text as given), then every
// setting of cfg with its default and help.
func Usage(w io.Writer, commands string, cfg any) {
	fmt.Fprint(w, commands)
	fmt.Fprintln(w, "\nSettings (environment variables):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range Settings(cfg) {
		def := s.Default
		switch {
		case s.Required:
			def = "(required)"
		case def == "":
			def = "(empty)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.Name, def, s.Help)
	}
	tw.Flush()
}

// CheckUsage reports the first problem of the usage written for cfg with
// commands: a setting without help, one missing from the text or shown
// without its default, or a command of want not named; nil if none. The
// programs' tests hold their --help to it.
func CheckUsage(commands string, cfg any, want ...string) error {
	var b strings.Builder
	Usage(&b, commands, cfg)
	text := b.String()
	for _, s := range Settings(cfg) {
		if s.Help == "" {
			return fmt.Errorf("%s has no help tag", s.Name)
		}
		line := ""
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), s.Name+" ") {
				line = l
			}
		}
		if line == "" || s.Default != "" && !strings.Contains(line, " "+s.Default+" ") {
			return fmt.Errorf("--help's line for %s: %q (default %q)", s.Name, line, s.Default)
		}
	}
	for _, cmd := range want {
		if !strings.Contains(text, cmd) {
			return fmt.Errorf("--help does not name %q", cmd)
		}
	}
	return nil
}
