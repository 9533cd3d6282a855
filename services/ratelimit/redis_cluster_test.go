package ratelimit

import (
	"testing"
	"time"
)

// TestRedisSlot checks the slot computation against values Redis itself
// gives (CLUSTER KEYSLOT), and that both cells of a window share a slot
// whatever braces the names hold.
func TestRedisSlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo":                    12182,
		"123456789":              12739, // CRC16/XMODEM check value 0x31C3
		"{user1000}.following":   redisSlot("user1000"),
		"foo{}{bar}":             redisSlot("foo{}{bar}"), // empty tag: the whole key
		"{a}{b}":                 redisSlot("a"),
		"no closing {brace here": redisSlot("no closing {brace here"),
	} {
		if got := redisSlot(key); got != want {
			t.Errorf("redisSlot(%q) = %d, want %d", key, got, want)
		}
	}
	for _, id := range []string{"plain", "with}brace", "with{brace", "}{", "{x}", ""} {
		cur := Cell{Workspace: "ws", Namespace: "n{s}", Identifier: id, Duration: time.Minute, Sequence: 1001}
		prev := cur
		prev.Sequence--
		if a, b := redisSlot(RedisKey(&cur)), redisSlot(RedisKey(&prev)); a != b {
			t.Errorf("identifier %q: cells of one window in slots %d and %d", id, a, b)
		}
	}
}

func TestRedisClusterOptions(t *testing.T) {
	opts, err := RedisClusterOptions("redis+cluster://user:pw@10.0.0.1:7000,10.0.0.2:7001,10.0.0.3:7002?max_redirects=5")
	if err != nil {
		t.Fatal(err)
	}
	if got := opts.Addrs; len(got) != 3 || got[0] != "10.0.0.1:7000" || got[2] != "10.0.0.3:7002" {
		t.Fatalf("seeds = %v", got)
	}
	if opts.Username != "user" || opts.Password != "pw" || opts.MaxRedirects != 5 || opts.MaxRetries != -1 || !opts.ContextTimeoutEnabled {
		t.Fatalf("options = %+v", opts)
	}
	if opts, err := RedisClusterOptions("rediss+cluster://h:1"); err != nil || opts.TLSConfig == nil {
		t.Fatalf("rediss+cluster: %+v, %v", opts, err)
	}
	for _, bad := range []string{"redis://h:1", "http+cluster://h:1", "redis+cluster://h:1,,h:2"} {
		if _, err := RedisClusterOptions(bad); err == nil {
			t.Errorf("RedisClusterOptions(%q) accepted", bad)
		}
	}
}
