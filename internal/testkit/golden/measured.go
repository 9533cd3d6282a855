package golden

import (
	"fmt"
	"os"
	"strings"
)

// Measured replaces the text between the lines "<!-- name:begin -->" and
// "<!-- name:end -->" in file with body: a report's table, measured by a
// test that writes it when asked (ACCURACY_REPORT), not checked against a
// source, since a measurement differs from run to run.
func Measured(file, name, body string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	text := string(raw)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s section markers", file, name)
	}
	text = text[:i+len(begin)] + body + text[j:]
	return os.WriteFile(file, []byte(text), 0o644)
}
