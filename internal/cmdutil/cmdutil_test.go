package cmdutil

import (
	"bytes"
	"strings"
	"testing"
)

func TestLog(t *testing.T) {
	for _, bad := range []Log{{Level: "loud", Format: "json"}, {Level: "info", Format: "xml"}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	var buf bytes.Buffer
	l := Log{Level: "warn", Format: "text"}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := l.Logger(&buf)
	logger.Info("hidden")
	logger.Warn("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "level=WARN msg=shown") {
		t.Fatalf("log output %q, want only the warning, as text", out)
	}
}

func TestParseMySQLDSN(t *testing.T) {
	cfg, err := ParseMySQLDSN("u:p@tcp(db:3306)/ratelimit")
	if err != nil || !cfg.InterpolateParams || cfg.DBName != "ratelimit" {
		t.Fatalf("%+v, %v", cfg, err)
	}
	if cfg, err := ParseMySQLDSN("u:p@tcp(db:3306)/ratelimit?interpolateParams=false"); err != nil || cfg.InterpolateParams {
		t.Fatalf("an explicit interpolateParams=false was overridden: %+v, %v", cfg, err)
	}
	for dsn, want := range map[string]string{
		"u:p@tcp(db:3306)/": "UNKEY_MYSQL_DSN: must name a database",
		"not a dsn":         "UNKEY_MYSQL_DSN: must be a go-sql-driver/mysql DSN",
	} {
		if _, err := ParseMySQLDSN(dsn); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMySQLDSN(%q) = %v, want %q", dsn, err, want)
		}
	}
}
