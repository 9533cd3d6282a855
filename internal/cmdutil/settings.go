package cmdutil

import "github.com/unkeyed/ratelimit/internal/envconfig"

// Settings is what both programs read of how their own settings are
// checked; each program's configuration embeds it.
type Settings struct {
	// AllowUnknown lets the program start beside UNKEY_* variables it
	// does not read (see CheckUnknown).
	AllowUnknown bool `env:"UNKEY_ALLOW_UNKNOWN_SETTINGS" help:"start although the environment holds UNKEY_* variables this program does not read; by default such a variable, a misspelled setting most likely, stops the start naming the nearest setting"`
}

// ReadByOthers are UNKEY_* variables that other programs read, which an
// environment shared with them may hold: the tests' wait slack, the
// client examples' token, and Unkey's root key and API id, which Unkey's
// SDKs, CLI and guides use.
var ReadByOthers = []string{"UNKEY_TEST_SLACK", "UNKEY_TOKEN", "UNKEY_ROOT_KEY", "UNKEY_API_ID"}

// CheckUnknown returns an error naming an UNKEY_* variable of environ
// that cfg, a program's configuration struct, does not read (nor another
// program, ReadByOthers), and the setting nearest to it; nil if there is
// none, or if s allows unknown ones.
func (s Settings) CheckUnknown(environ []string, cfg any) error {
	if s.AllowUnknown {
		return nil
	}
	return envconfig.Unknown(environ, "UNKEY_", append(envconfig.Names(cfg), ReadByOthers...), "UNKEY_ALLOW_UNKNOWN_SETTINGS")
}
