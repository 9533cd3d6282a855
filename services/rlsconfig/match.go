package rlsconfig

import (
	"strings"
	"unicode/utf8"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Entry is one entry of a request's descriptor.
type Entry struct{ Key, Value string }

// Match is the rule a descriptor matched and the counter it is counted
// under.
type Match struct {
	Rule *Rule
	// Identifier names the descriptor's counter within its domain's
	// namespace: see Identifier.
	Identifier string
	// Metric labels the rule in metrics: Rule.Path, or the request's own
	// values where the rule asks for them (detailed_metric on the rule,
	// value_to_metric on a level).
	Metric string
	// MetricKeys are Metric's first two levels (Rule.Keys, or with the
	// request's values where Metric has them).
	MetricKeys [2]string
}

// Match finds the rule for a descriptor of domain, as envoyproxy/ratelimit
// does: level by level, each entry matches its key and value exactly, else
// the first wildcard value of its level (file order) that matches, else its
// key alone; the rule applies only if it sits at the level of the last
// entry. It reports false when no rule applies: an unknown domain, an entry
// that matches nothing, or a descriptor longer or shorter than the rule's
// path.
func (c *Config) Match(domain string, entries []Entry) (Match, bool) {
	level := c.domains[domain]
	if level == nil || len(entries) == 0 {
		return Match{}, false
	}
	path := make([]*node, len(entries))
	var rule *Rule
	for i, e := range entries {
		next := level.child(e)
		if next == nil {
			return Match{}, false
		}
		path[i] = next
		if i == len(entries)-1 {
			rule = next.rule
			break
		}
		if len(next.exact) == 0 && len(next.wildcards) == 0 {
			return Match{}, false // the descriptor is longer than the tree
		}
		level = next
	}
	if rule == nil {
		return Match{}, false
	}
	m := Match{Rule: rule, Identifier: identifier(entries, path), MetricKeys: rule.Keys}
	m.Metric = metric(domain, rule, entries, path, &m.MetricKeys)
	return m, true
}

// child finds the node of e among n's children.
func (n *node) child(e Entry) *node {
	if e.Value != "" {
		if c := n.exact[entry{key: e.Key, value: e.Value, hasValue: true}]; c != nil {
			return c
		}
	}
	for _, w := range n.wildcards {
		if w.key == e.Key && wildcardMatch(w.wildcard, e.Value) {
			return w
		}
	}
	return n.exact[entry{key: e.Key}]
}

// matchedValue reports whether n matched e by its value (exactly or by a
// wildcard) rather than by its key alone.
func (n *node) matchedValue() bool { return n.value != "" }

// wildcardMatch reports whether value matches a pattern split on '*': it
// starts with the first part, ends with the last, and holds the parts
// between in order without overlap. Each '*' matches any run of characters,
// including none. Matching the middle parts leftmost-first is exact for
// patterns whose only special character is '*', and linear in value per
// part.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// identifier names a descriptor's counter: its entries as key=value joined
// by commas, with '%', ',', '=', '*' and control characters in keys and
// values percent-escaped,
// so that no two descriptors share a counter by accident. An entry that
// matched a wildcard with share_threshold is written with the wildcard
// itself as its value, '*' unescaped: every value it matches shares one
// counter, and no literal value can name it.
func identifier(entries []Entry, path []*node) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		writeEscaped(&b, e.Key)
		b.WriteByte('=')
		if n := path[i]; n != nil && n.shareThreshold {
			for j, part := range n.wildcard {
				if j > 0 {
					b.WriteByte('*')
				}
				writeEscaped(&b, part)
			}
			continue
		}
		writeEscaped(&b, e.Value)
	}
	return b.String()
}

// Identifier is the counter name of a descriptor that matched no rule of
// the file but carries its own limit (a descriptor-level limit set in
// Envoy's route configuration): its entries, written as for a rule.
func Identifier(entries []Entry) string { return identifier(entries, make([]*node, len(entries))) }

func writeEscaped(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == '%' || r == ',' || r == '=' || r == '*' || ratelimit.IsControl(r) || r == utf8.RuneError {
			// Control characters and bytes that are not UTF-8 are escaped
			// too, so the name is a valid counter name whatever the
			// descriptor's values hold.
			for _, c := range []byte(s[i : i+n]) {
				b.WriteByte('%')
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&15])
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
}

// metric returns the metrics label of a match: the rule's path, unless the
// rule or a level asks for the request's values, and then sets keys to the
// label's first two levels. With detailed_metric, every level is written
// with the request's value (a shared wildcard with its pattern); with
// value_to_metric on a level matched by its key alone or by a wildcard,
// that level is written with the request's value.
func metric(domain string, rule *Rule, entries []Entry, path []*node, keys *[2]string) string {
	detailed := rule.DetailedMetric
	if !detailed {
		toMetric := false
		for _, n := range path {
			toMetric = toMetric || (n.valueToMetric && (n.wildcard != nil || !n.matchedValue()))
		}
		if !toMetric {
			return rule.Path
		}
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		n := path[i]
		b.WriteByte('.')
		start := b.Len()
		b.WriteString(e.Key)
		value := ""
		switch {
		case n.shareThreshold:
			value = n.value // the values share one counter: name it
		case detailed, n.valueToMetric:
			value = e.Value
		case n.matchedValue():
			value = n.value
		}
		if value != "" {
			b.WriteByte('_')
			b.WriteString(value)
		}
		if i < len(keys) {
			keys[i] = b.String()[start:]
		}
	}
	return b.String()
}
