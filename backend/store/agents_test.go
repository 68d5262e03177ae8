package store

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestAgentModel checks the agent's optional model override: a record written before agents
// had one (no "model" key) decodes with Model nil and stays free of the key when saved again;
// an override survives a reopen; clearing it removes the key from the record.
func TestAgentModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cubicle.db")
	latest := strconv.Itoa(len(migrations) + 1)
	writeRaw(t, path, map[string]map[string]string{
		"meta": {"version": latest}, "accounts": {}, "account_usernames": {}, "node_settings": {},
		"vm_images": {}, "vm_instances": {}, "vm_bindings": {}, "chat_sessions": {}, "tool_runs": {}, "app_settings": {},
		"agents": {"gv": legacyVM},
	})
	open := func() *Store {
		t.Helper()
		s, err := Open(path, testOpts(t, nil))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	a, err := s.Agent("gv")
	if err != nil || a.Model != nil || a.Name != "VM bot" {
		t.Fatalf("old record = %+v, %v", a, err)
	}
	if _, err := s.UpdateAgent("gv", func(a *Agent) error { a.Name = "Renamed"; return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if raw := readRaw(t, path, "agents", "gv"); strings.Contains(raw, `"model"`) {
		t.Fatalf("an agent without an override saved a model key: %s", raw)
	}

	s = open()
	want := AgentModel{BaseURL: "https://b.example/v1", Model: "m-b", APIKeySealed: []byte{1, 2, 3}}
	if _, err := s.UpdateAgent("gv", func(a *Agent) error { m := want; a.Model = &m; return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open()
	a, err = s.Agent("gv")
	if err != nil || a.Model == nil || a.Model.BaseURL != want.BaseURL || a.Model.Model != want.Model ||
		!bytes.Equal(a.Model.APIKeySealed, want.APIKeySealed) || a.Name != "Renamed" {
		t.Fatalf("after reopen = %+v (model %+v), %v", a, a.Model, err)
	}
	if a.Model.Empty() || !(*AgentModel)(nil).Empty() || !(&AgentModel{}).Empty() {
		t.Fatal("Empty is wrong")
	}
	if _, err := s.UpdateAgent("gv", func(a *Agent) error { a.Model = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if raw := readRaw(t, path, "agents", "gv"); strings.Contains(raw, `"model"`) {
		t.Fatalf("a cleared override left a model key: %s", raw)
	}
}

// Accounts written with the legacy role word "user" read as members.
func TestLegacyRoleUser(t *testing.T) {
	var a Account
	if err := json.Unmarshal([]byte(`{"id":"x","username":"u","role":"user"}`), &a); err != nil || a.Role != RoleMember {
		t.Fatalf("%+v %v", a, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"x","username":"u","role":"admin"}`), &a); err != nil || a.Role != RoleAdmin {
		t.Fatalf("%+v %v", a, err)
	}
}
