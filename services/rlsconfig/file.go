package rlsconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The file format is envoyproxy/ratelimit's, field for field, so that its
// users point this service at the files they have. Unknown keys are refused,
// as envoyproxy/ratelimit refuses them: a misspelt key would otherwise turn
// a limit off without a word.

type fileRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []fileDescriptor `yaml:"descriptors"`
}

type fileDescriptor struct {
	Key       string         `yaml:"key"`
	Value     string         `yaml:"value"`
	RateLimit *fileRateLimit `yaml:"rate_limit"`
	// RateLimits are more limits of the descriptor, each its own window
	// (this service's addition to the format).
	RateLimits     []fileLimit      `yaml:"rate_limits"`
	Descriptors    []fileDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	// QuotaMode and Metadata are a rule's (see Rule); on a descriptor
	// without a rate_limit they do nothing, as in envoyproxy/ratelimit.
	QuotaMode bool           `yaml:"quota_mode"`
	Metadata  map[string]any `yaml:"metadata"`
	// Penalty and PenaltyMax are a rule's (this service's addition, see
	// Rule): Go durations, "5m".
	Penalty    string `yaml:"penalty"`
	PenaltyMax string `yaml:"penalty_max"`
}

type fileRateLimit struct {
	fileLimit `yaml:",inline"`
	Unlimited bool          `yaml:"unlimited"`
	Replaces  []fileReplace `yaml:"replaces"`
}

// fileLimit is one limit: rate_limit's, or an entry of rate_limits.
type fileLimit struct {
	Unit            string  `yaml:"unit"`
	RequestsPerUnit *uint32 `yaml:"requests_per_unit"`
	// UnitMultiplier (this service's addition, as Envoy's proposed field
	// names it) makes the window that many units: 5 minutes.
	UnitMultiplier *uint32 `yaml:"unit_multiplier"`
	Name           string  `yaml:"name"`
	// Algorithm, Burst and Calendar choose the limit's model (this
	// service's additions): sliding_window (the default), fixed_window,
	// token_bucket with its burst, or concurrency (requests_per_unit
	// slots in flight, leases of unit × unit_multiplier); a calendar's
	// periods in place of unit.
	Algorithm string        `yaml:"algorithm"`
	Burst     *uint32       `yaml:"burst"`
	Calendar  *fileCalendar `yaml:"calendar"`
}

// fileCalendar names calendar periods: a unit (day, week, month, year) on
// a time zone's clock, UTC when none.
type fileCalendar struct {
	Unit     string `yaml:"unit"`
	TimeZone string `yaml:"time_zone"`
}

type fileReplace struct {
	Name string `yaml:"name"`
}

// File is one configuration file: its name (for errors) and contents.
type File struct {
	Name string
	Data []byte
}

// parseFile decodes one file. A file may hold several YAML documents, each
// one domain; an empty file (or document) holds none.
func parseFile(f File) ([]fileRoot, error) {
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	dec.KnownFields(true)
	var roots []fileRoot
	for {
		var root fileRoot
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			return roots, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s", f.Name, cleanYAMLError(err))
		}
		if root.Domain == "" && len(root.Descriptors) == 0 {
			continue // an empty document
		}
		roots = append(roots, root)
	}
}

// cleanYAMLError drops the "yaml: " prefix, which says nothing a file name
// does not, and says what a field takes in the words of the file rather
// than the program's Go types ("cannot unmarshal !!str `lots` into
// uint32" becomes "got the string \"lots\", want a whole number").
func cleanYAMLError(err error) string {
	msg := strings.TrimPrefix(strings.ReplaceAll(err.Error(), "yaml: unmarshal errors:\n  ", ""), "yaml: ")
	return yamlTypeError.ReplaceAllStringFunc(msg, func(m string) string {
		sub := yamlTypeError.FindStringSubmatch(m)
		return "got " + yamlValue(sub[1], sub[2]) + ", want " + yamlWant(sub[3])
	})
}

// yamlTypeError matches the decoder's words for a value of the wrong kind:
// its YAML tag, the value for a scalar, and the Go type it was not.
var yamlTypeError = regexp.MustCompile("cannot unmarshal !!(\\w+)(?: `([^`]*)`)? into (\\S+)")

// yamlValue says what a file holds: a YAML tag and, for a scalar, its text.
func yamlValue(tag, text string) string {
	kind := map[string]string{"str": "the string", "int": "the number", "float": "the number", "bool": "the boolean",
		"map": "a mapping (key: value lines)", "seq": "a list (- lines)", "null": "nothing"}[tag]
	if kind == "" {
		kind = "a " + tag
	}
	if text != "" {
		return kind + " " + strconv.Quote(text)
	}
	return kind
}

// yamlWant says what a Go type takes, in the file's words.
func yamlWant(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list (- lines)"
	case goType == "uint32":
		return "a whole number from 0 to 4294967295"
	case strings.HasPrefix(goType, "uint"):
		return "a whole number, 0 or more"
	case strings.HasPrefix(goType, "int"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "a mapping (key: value lines)"
	}
	return goType
}
