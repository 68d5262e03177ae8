package store

import (
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// MCPServer is an MCP server an administrator configured for agents (package mcpclient). Its
// secrets (HTTP headers, stdio environment values) are sealed; this record never holds them
// in clear.
type MCPServer struct {
	ID   string `json:"id"`
	Name string `json:"name"` // the <server> of mcp_<server>_<tool>; unique
	// Transport is "http" (streamable HTTP), "sse" (the older HTTP+SSE transport) or "stdio".
	Transport   string `json:"transport"`
	Description string `json:"description,omitempty"`
	URL         string `json:"url,omitempty"` // http, sse
	// Headers are HTTP header values by name, sealed (http, sse).
	Headers map[string][]byte `json:"headers,omitempty"`
	// AllowPrivate lets the URL be a loopback or private address (the rule of model endpoints).
	AllowPrivate bool   `json:"allowPrivate,omitempty"`
	Command      string `json:"command,omitempty"` // stdio: run inside the agent's desktop
	// OnServer (stdio): the command runs on the Cubicle server itself, in its OS sandbox, for
	// accounts with host access there — an administrator's explicit choice; off by default.
	OnServer bool     `json:"onServer,omitempty"`
	Args     []string `json:"args,omitempty"`
	// Env are environment values by name, sealed (stdio).
	Env map[string][]byte `json:"env,omitempty"`
	// TimeoutSeconds bounds one tool call (0: the default).
	TimeoutSeconds int       `json:"timeoutSeconds,omitempty"`
	Disabled       bool      `json:"disabled,omitempty"`
	Policy         MCPPolicy `json:"policy"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	UpdatedBy      string    `json:"updatedBy,omitempty"`
}

// MCPPolicy is the access policy of one MCP server: its default effect (for every subject) and
// rules for subjects, for the whole server (Tool "") or one tool.
type MCPPolicy struct {
	Default string    `json:"default"` // "allow", "ask" or "deny"
	Rules   []MCPRule `json:"rules,omitempty"`
}

// MCPRule is one rule of an MCP access policy.
type MCPRule struct {
	Tool    string `json:"tool,omitempty"` // the server's own tool name; "" is the whole server
	Subject string `json:"subject"`        // "user:NAME", "agent:ID" or "*"
	Effect  string `json:"effect"`         // "allow", "ask" or "deny"
}

// MCPConfig is every configured MCP server and which agents use which.
type MCPConfig struct {
	Servers []MCPServer `json:"servers,omitempty"`
	// Agents maps an agent id to the ids of the servers it uses.
	Agents map[string][]string `json:"agents,omitempty"`
}

var keyMCPServers = []byte("mcp-servers")

// MCPConfig returns the MCP servers and their agents.
func (s *Store) MCPConfig() (MCPConfig, error) {
	var out MCPConfig
	err := s.view("get mcp servers", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketAppSettings).Get(keyMCPServers)
		if raw == nil {
			return nil
		}
		return json.Unmarshal(raw, &out)
	})
	return out, err
}

// UpdateMCPConfig replaces the MCP configuration with what fn makes of it, in one transaction
// (so concurrent changes are never lost). An error from fn changes nothing.
func (s *Store) UpdateMCPConfig(fn func(*MCPConfig) error) error {
	return s.update("update mcp servers", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketAppSettings)
		var c MCPConfig
		if raw := b.Get(keyMCPServers); raw != nil {
			if err := json.Unmarshal(raw, &c); err != nil {
				return fmt.Errorf("store: corrupt mcp servers: %w", err)
			}
		}
		if err := fn(&c); err != nil {
			return err
		}
		raw, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("store: encode mcp servers: %w", err)
		}
		return b.Put(keyMCPServers, raw)
	})
}
