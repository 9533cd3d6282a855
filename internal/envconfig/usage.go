package envconfig

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
)

// Setting is one variable a configuration struct reads, as its tags say,
// or one a library reads itself (see [Section]).
type Setting struct {
	Name string
	// Default is the value the program uses when the variable is unset
	// or empty: its envDefault tag, else the zero value of its type
	// (false, 0, 0s); "" for an empty string or list.
	Default  string
	Required bool
	// Help says what the setting is, and its bounds.
	Help string
	// Field is the name of the struct field the variable is read into
	// (empty for a library's), which caarlos0/env's errors name.
	Field string
}

// Section is a group of settings that a library reads from the process's
// environment itself, not from the configuration struct (such as the
// OpenTelemetry SDK's OTEL_* variables), which --help lists under Title.
type Section struct {
	Title    string
	Settings []Setting
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
			def, ok := f.Tag.Lookup("envDefault")
			if !ok {
				def = zero(f.Type)
			}
			out = append(out, Setting{Name: name, Default: def, Required: strings.Contains(opts, "required"),
				Help: f.Tag.Get("help"), Field: f.Name})
		}
	}
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	walk(t)
	return out
}

// zero returns the zero value of a setting of type t as --help shows it:
// false, 0 or 0s; "" for a string or a list, shown as empty.
func zero(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return fmt.Sprint(reflect.Zero(t).Interface()) // a time.Duration writes 0s
	}
	return ""
}

// Usage writes a program's usage: its commands (text as given), then every
// setting of cfg with its default and help, then each of sections.
func Usage(w io.Writer, commands string, cfg any, sections ...Section) {
	fmt.Fprint(w, commands)
	fmt.Fprintln(w, "\nSettings (environment variables):")
	table(w, Settings(cfg))
	for _, sec := range sections {
		fmt.Fprintf(w, "\n%s\n", sec.Title)
		table(w, sec.Settings)
	}
}

// table writes settings one a line: name, default, help.
func table(w io.Writer, settings []Setting) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range settings {
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
// commands and sections: a setting without help, one missing from the
// text or shown without its default, a default shown for a setting of cfg
// that is not the value the program uses when the variable is unset
// (parsed as the program parses it), or a command of want not named; nil
// if none. The programs' tests hold their --help to it.
func CheckUsage(commands string, cfg any, sections []Section, want ...string) error {
	var b strings.Builder
	Usage(&b, commands, cfg, sections...)
	text := b.String()
	all := Settings(cfg)
	for _, sec := range sections {
		all = append(all, sec.Settings...)
	}
	for _, s := range all {
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
	if err := checkDefaults(cfg); err != nil {
		return err
	}
	for _, cmd := range want {
		if !strings.Contains(text, cmd) {
			return fmt.Errorf("--help does not name %q", cmd)
		}
	}
	return nil
}

// checkDefaults reports the first setting of cfg whose default, as --help
// shows it, parses to another value than the program reads with the
// variable unset (the required ones set to "x"); nil if none.
func checkDefaults(cfg any) error {
	t := reflect.TypeOf(cfg)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	settings := Settings(cfg)
	var environ []string
	for _, s := range settings {
		if s.Required {
			environ = append(environ, s.Name+"=x")
		}
	}
	unset := reflect.New(t)
	if err := Parse(environ, unset.Interface()); err != nil {
		return fmt.Errorf("parse with every setting unset: %w", err)
	}
	for _, s := range settings {
		if s.Required {
			continue
		}
		shown := reflect.New(t)
		if err := Parse(append(environ, s.Name+"="+s.Default), shown.Interface()); err != nil {
			return fmt.Errorf("--help's default of %s, %q, does not parse: %w", s.Name, s.Default, err)
		}
		if !reflect.DeepEqual(shown.Elem().Interface(), unset.Elem().Interface()) {
			return fmt.Errorf("--help shows %s's default as %q, which is not the value the program uses unset", s.Name, s.Default)
		}
	}
	return nil
}

// Markdown writes settings as the rows of a Markdown table of three
// columns, variable, default and meaning (a reference page's, written
// from the tags --help is written from).
func Markdown(w io.Writer, settings []Setting) {
	fmt.Fprintln(w, "| variable | default | what it sets |")
	fmt.Fprintln(w, "|---|---|---|")
	cell := strings.NewReplacer("|", `\|`, "\n", " ")
	for _, s := range settings {
		def := "`" + s.Default + "`"
		switch {
		case s.Required:
			def = "(required)"
		case s.Default == "":
			def = "(empty)"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s |\n", s.Name, cell.Replace(def), cell.Replace(s.Help))
	}
}
