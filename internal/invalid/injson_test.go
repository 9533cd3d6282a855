package invalid

import "testing"

func TestInJSON(t *testing.T) {
	for in, want := range map[string]string{
		"identifier":                 "identifier",
		"calendar.time_zone":         "calendar.timeZone",
		"limits[2].lease_id":         "limits[2].leaseId",
		"descriptors[0].hits_addend": "descriptors[0].hitsAddend",
		"body":                       "body",
	} {
		if got := InJSON(in); got != want {
			t.Errorf("InJSON(%q) = %q, want %q", in, got, want)
		}
	}
}
