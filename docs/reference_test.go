package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/golden"
)

// The API's reference, docs/api-reference.md, is written from the proto
// files: each service, RPC, message, field, enum and value with the
// comment above it in the .proto, so that the reference says what the
// API's source says.

// protoFiles are the API's proto files, in the order the reference lists
// them.
var protoFiles = []string{"ratelimit.proto", "keys.proto", "analytics.proto"}

var (
	protoBlock = regexp.MustCompile(`^(service|message|enum) (\w+) \{(\})?$`)
	protoRPC   = regexp.MustCompile(`^rpc (\w+)\((\w+)\) returns \((\w+)\)`)
	protoField = regexp.MustCompile(`^(optional |repeated )?([\w.]+|map<[\w, ]+>) (\w+) = \d+;`)
	protoValue = regexp.MustCompile(`^(\w+) = (\d+);`)
)

// protoReference renders one proto file's declarations as Markdown.
func protoReference(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "connect", "ratelimit", "v1", name))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	cell := strings.NewReplacer("|", `\|`)
	var comment []string
	kind := ""
	flush := func() string { c := strings.Join(comment, " "); comment = nil; return c }
	for n, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "//"):
			comment = append(comment, strings.TrimSpace(strings.TrimPrefix(line, "//")))
		case line == "}":
			kind = ""
			comment = nil
		case protoBlock.MatchString(line):
			if kind != "" {
				t.Fatalf("connect/ratelimit/v1/%s:%d: a declaration nested in a %s, which the reference does not know how to write", name, n+1, kind)
			}
			m := protoBlock.FindStringSubmatch(line)
			kind = m[1]
			level := "###"
			if kind == "service" {
				level = "##"
			}
			fmt.Fprintf(&b, "\n%s %s `%s`\n\n%s\n\n", level, kind, m[2], flush())
			if m[3] != "" {
				b.WriteString("No fields.\n")
				kind = ""
				continue
			}
			switch kind {
			case "service":
				b.WriteString("| RPC | request | response | what it does |\n|---|---|---|---|\n")
			case "message":
				b.WriteString("| field (JSON) | type | what it holds |\n|---|---|---|\n")
			case "enum":
				b.WriteString("| value | number | what it means |\n|---|---|---|\n")
			}
		case kind == "service" && protoRPC.MatchString(line):
			m := protoRPC.FindStringSubmatch(line)
			fmt.Fprintf(&b, "| `%s` | [`%s`](#message-%s) | [`%s`](#message-%s) | %s |\n",
				m[1], m[2], strings.ToLower(m[2]), m[3], strings.ToLower(m[3]), cell.Replace(flush()))
		case kind == "message" && protoField.MatchString(line):
			m := protoField.FindStringSubmatch(line)
			typ := strings.TrimSpace(m[1] + m[2])
			fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", jsonName(m[3]), typ, cell.Replace(flush()))
		case kind == "enum" && protoValue.MatchString(line):
			m := protoValue.FindStringSubmatch(line)
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", m[1], m[2], cell.Replace(flush()))
		case line == "":
			// A blank line ends no comment in this style: the next
			// declaration takes the comment right above it.
		case kind != "" && !strings.HasPrefix(line, "option "):
			t.Fatalf("connect/ratelimit/v1/%s:%d: %q is no declaration the reference knows how to write", name, n+1, line)
		default:
			comment = nil
		}
	}
	return b.String()
}

// jsonName is the JSON name protobuf gives a field: lowerCamelCase.
func jsonName(field string) string {
	parts := strings.Split(field, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// TestAPIReference: docs/api-reference.md is what the proto files'
// declarations and comments make; UPDATE_DOCS=1 (make docs) rewrites it.
func TestAPIReference(t *testing.T) {
	found, err := filepath.Glob(filepath.Join("..", "connect", "ratelimit", "v1", "*.proto"))
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(protoFiles) {
		t.Fatalf("connect/ratelimit/v1 holds %d proto files, the reference lists %d (protoFiles): add the new one", len(found), len(protoFiles))
	}
	var b strings.Builder
	for _, f := range protoFiles {
		fmt.Fprintf(&b, "\n<a id=\"%s\"></a>\n\n# `%s`\n", strings.TrimSuffix(f, ".proto"), f)
		b.WriteString(protoReference(t, f))
	}
	golden.Region(t, "api-reference.md", "proto", b.String())
	if n := strings.Count(b.String(), "| `"); n < 150 {
		t.Errorf("the reference has %d rows, expected more: are the declarations still found?", n)
	}
}
