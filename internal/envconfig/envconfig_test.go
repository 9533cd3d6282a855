package envconfig

import (
	"strings"
	"testing"
	"time"
)

type testConfig struct {
	Interval time.Duration `env:"APP_INTERVAL" envDefault:"1s"`
	Enabled  bool          `env:"APP_ENABLED"`
	Count    int           `env:"APP_COUNT"`
	Name     string        `env:"APP_NAME,required"`
}

// TestParseNamesTheVariable: a value a setting's type cannot hold is an
// error naming the variable, the value and what it takes.
func TestParseNamesTheVariable(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"APP_INTERVAL=2", `APP_INTERVAL: must be a duration such as 500ms, 10s or 1h, got "2"`},
		{"APP_ENABLED=yes please", `APP_ENABLED: must be true or false, got "yes please"`},
		{"APP_COUNT=1.5", `APP_COUNT: must be a whole number, got "1.5"`},
	} {
		var c testConfig
		err := Parse([]string{"APP_NAME=x", tc.set}, &c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.set, err, tc.want)
		}
	}
	var c testConfig
	if err := Parse(nil, &c); err == nil || !strings.Contains(err.Error(), "APP_NAME") {
		t.Errorf("without a required variable: %v, want it named", err)
	}
	if err := Parse([]string{"APP_NAME=x", "APP_INTERVAL=250ms"}, &c); err != nil || c.Interval != 250*time.Millisecond {
		t.Errorf("a good environment: %v %+v", err, c)
	}
}

// TestUnknown: a variable with the prefix that no setting reads is named
// with the nearest setting, in name order when there are several; one
// that is known, or has another prefix, is none.
func TestUnknown(t *testing.T) {
	known := Names(testConfig{})
	for _, tc := range []struct {
		environ []string
		want    string
	}{
		{[]string{"APP_NAME=x", "OTHER_THING=1"}, ""},
		// Kubernetes' service links of a Service named app-api.
		{[]string{"APP_API_SERVICE_HOST=10.0.0.1", "APP_API_SERVICE_PORT=80", "APP_API_SERVICE_PORT_HTTP=80", "APP_API_PORT=tcp://10.0.0.1:80",
			"APP_API_PORT_80_TCP_ADDR=10.0.0.1"}, ""},
		{[]string{"APP_INTERVALL=2s"}, "APP_INTERVALL: no such setting; did you mean APP_INTERVAL?"},
		{[]string{"APP_NAM=x", "APP_ENABLE=true"}, "APP_ENABLE: no such setting; did you mean APP_ENABLED? (and 1 more unknown: APP_NAM)"},
		{[]string{"APP_CONT=1"}, "APP_CONT: no such setting; did you mean APP_COUNT?"},
	} {
		err := Unknown(tc.environ, "APP_", known, "APP_ALLOW")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want none", tc.environ, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want) || !strings.Contains(err.Error(), "APP_ALLOW=true")):
			t.Errorf("%q: %v, want %q and the setting that allows it", tc.environ, err, tc.want)
		}
	}
}
