package daemon_test

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// openAPIDocument is the v2 routes' OpenAPI document as a server serves
// it, decoded for the schema compiler.
func openAPIDocument(t *testing.T, ts *testServer) map[string]any {
	t.Helper()
	status, body := ts.get(t, "/v2/openapi.yaml")
	if status != 200 {
		t.Fatalf("GET /v2/openapi.yaml: %d %s", status, body)
	}
	var tree any
	if err := yaml.Unmarshal([]byte(body), &tree); err != nil {
		t.Fatalf("/v2/openapi.yaml is no YAML: %v", err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := doc.(map[string]any)
	if !ok || m["openapi"] != "3.1.0" {
		t.Fatalf("/v2/openapi.yaml is no OpenAPI 3.1 document: %.200v", doc)
	}
	return m
}

// pointer escapes a JSON pointer's token.
func pointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// TestOpenAPI: the OpenAPI document a server serves at /v2/openapi.yaml
// names exactly the v2 routes it serves (each a POST), and every answer
// of a call of each route, made with the document's example body (a
// reservation's and a lease's id taken from the answers before), is what
// the document's schema of that status says, as are the answers to a
// bad field, a bad key and a missing override; a request example the
// document's own request schema refuses fails too.
func TestOpenAPI(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	doc := openAPIDocument(t, ts)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	paths := doc["paths"].(map[string]any)
	// schema compiles the schema of a route's request body ("requestBody")
	// or answer of a status ("responses/200"), through the answer's $ref
	// to the components when it has one.
	schema := func(path, where string) *jsonschema.Schema {
		t.Helper()
		at := "#/paths/" + pointer(path) + "/post/" + where
		if status, ok := strings.CutPrefix(where, "responses/"); ok {
			r, _ := paths[path].(map[string]any)["post"].(map[string]any)["responses"].(map[string]any)[status].(map[string]any)
			if r == nil {
				t.Fatalf("%s: the document gives no answer of status %s", path, status)
			}
			if ref, ok := r["$ref"].(string); ok {
				at = ref
			}
		}
		s, err := c.Compile("openapi.json" + at + "/content/application~1json/schema")
		if err != nil {
			t.Fatalf("%s %s: %v", path, where, err)
		}
		return s
	}

	// The document's routes are the server's: a path it does not serve
	// is answered 404 with the paths it does, which must be these.
	var documented []string
	for p, ops := range paths {
		if _, ok := ops.(map[string]any)["post"]; !ok {
			t.Errorf("%s: no post operation", p)
		}
		documented = append(documented, p)
	}
	slices.Sort(documented)
	status, body := ts.post(t, "/v2/nothing", tokA, strings.NewReader(`{}`))
	served := regexp.MustCompile(`/v2/ratelimit\.[A-Za-z]+`).FindAllString(string(body), -1)
	slices.Sort(served)
	if status != 404 || !slices.Equal(served, documented) {
		t.Errorf("the server says it serves %q, the document names %q: %d %s", served, documented, status, body)
	}
	if !strings.Contains(string(body), "GET /v2/openapi.yaml") {
		t.Errorf("the answer to a path the server does not serve does not name the document: %s", body)
	}

	// Each route called with its example, in an order that gives the
	// later ones their ids.
	fill := map[string]string{}
	order := []string{"limit", "multiLimit", "setOverride", "getOverride", "listOverrides", "deleteOverride", "acquire", "extend", "release"}
	if len(order) != len(documented)-1 {
		t.Fatalf("the test calls %d routes, the document has %d: call the new one", len(order)+1, len(documented))
	}
	call := func(name, body string, want int) map[string]any {
		t.Helper()
		path := "/v2/ratelimit." + name
		status, raw := ts.post(t, path, tokA, strings.NewReader(body))
		if status != want {
			t.Fatalf("%s %s: %d %s, want %d", path, body, status, raw, want)
		}
		answer, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v: %s", path, err, raw)
		}
		if err := schema(path, "responses/"+strconv.Itoa(want)).Validate(answer); err != nil {
			t.Errorf("%s answered %d %s, which is not what the document says:\n%v", path, status, raw, err)
		}
		m, _ := answer.(map[string]any)
		return m
	}
	example := func(name string) string {
		t.Helper()
		path := "/v2/ratelimit." + name
		ex := paths[path].(map[string]any)["post"].(map[string]any)["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["example"]
		if err := schema(path, "requestBody").Validate(ex); err != nil {
			t.Errorf("%s: the document's example is refused by its own schema: %v", path, err)
		}
		raw, err := json.Marshal(ex)
		if err != nil {
			t.Fatal(err)
		}
		out := string(raw)
		for placeholder, value := range fill {
			out = strings.ReplaceAll(out, placeholder, value)
		}
		return out
	}
	for _, name := range order {
		answer := call(name, example(name), 200)
		data, _ := answer["data"].(map[string]any)
		if id, ok := data["leaseId"].(string); ok {
			fill["(an acquire's leaseId)"] = id
		}
	}
	// settle: a reservation of the limit route, settled.
	answer := call("limit", `{"namespace":"openapi","identifier":"r","limit":100000,"duration":60000,"cost":5000,"reserve":true}`, 200)
	fill["(a limit's reservation)"] = answer["data"].(map[string]any)["reservation"].(string)
	call("settle", example("settle"), 200)

	// Failures, in Unkey's error body.
	call("limit", `{"namespace":"openapi","identifier":"r","limit":2,"duration":10}`, 400)
	call("getOverride", `{"namespace":"openapi","identifier":"nobody"}`, 404)
	if status, raw := ts.post(t, "/v2/ratelimit.limit", "unknown-key", strings.NewReader(example("limit"))); status != 401 {
		t.Errorf("a bad key: %d %s, want 401", status, raw)
	} else if a, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw)); err != nil || schema("/v2/ratelimit.limit", "responses/401").Validate(a) != nil {
		t.Errorf("a bad key's answer %s is not the document's error body", raw)
	}
}
