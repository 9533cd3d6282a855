package envconfig

import (
	"strings"
	"testing"
	"time"
)

type sample struct {
	Name    string        `env:"NAME,required" help:"a name"`
	On      bool          `env:"ON" help:"a switch"`
	Every   time.Duration `env:"EVERY" help:"an interval"`
	Count   int           `env:"COUNT" envDefault:"5" help:"a count"`
	Address string        `env:"ADDRESS" help:"an address"`
	List    []string      `env:"LIST" help:"a list"`
}

// TestDefaultsShownAreUsed: a setting without envDefault shows its type's
// zero value (false, 0s), a string or list (empty), and CheckUsage finds
// every default shown to be the value parsed with the variable unset.
func TestDefaultsShownAreUsed(t *testing.T) {
	var b strings.Builder
	Usage(&b, "sample\n", sample{})
	for _, want := range []string{"NAME     (required)", "ON       false", "EVERY    0s", "COUNT    5", "ADDRESS  (empty)", "LIST     (empty)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
	if err := CheckUsage("sample\n", sample{}, []Section{{Title: "More:", Settings: []Setting{{Name: "MORE", Default: "1", Help: "more"}}}}); err != nil {
		t.Error(err)
	}
	if err := CheckUsage("sample\n", sample{}, []Section{{Title: "More:", Settings: []Setting{{Name: "MORE", Default: "1"}}}}); err == nil {
		t.Error("a setting of a section without help passed")
	}
}
