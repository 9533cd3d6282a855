package spelling

import "testing"

func TestNearest(t *testing.T) {
	names := []string{"REDIS_URL", "REDIS_TLS", "RUNTIME_ROOT"}
	for _, tc := range []struct {
		name, want string
		edits      int
	}{
		{"REDIS_UR", "REDIS_URL", 1},
		{"REDIS_URL", "REDIS_URL", 0},
		{"RUNTIME_RO0T", "RUNTIME_ROOT", 1},
		{"REDIS_TL", "REDIS_TLS", 1},
		{"", "REDIS_TLS", 9}, // equally far from both REDIS_ names: the first in name order
	} {
		if got, edits := nearest(tc.name, names); got != tc.want || edits != tc.edits {
			t.Errorf("nearest(%q) = %q, %d; want %q, %d", tc.name, got, edits, tc.want, tc.edits)
		}
	}
}
