package tools

import (
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
)

// The share tools hand a file the agent produced to the person: a table (CSV), an image, a
// report. The chat renders it (a table, an image) and offers it for download; the model only
// learns that it was shared.
const (
	shareLead   = "Hand a file to the person in the chat (a table as CSV, an image, a report; at most 25 MiB): they see it rendered and can download it. The file is"
	shareParams = `{"type":"object","properties":{"path":{"type":"string","description":"file path; relative paths start in the working directory"},` +
		`"name":{"type":"string","description":"the name the person sees (default: the file's name)"}},"required":["path"]}`
)

// shareFile hands data (read from p) to the person as a data block.
func shareFile(out *agent.ToolOutput, p, name string, data []byte) error {
	if len(data) > agent.MaxDataBlock {
		return fault.Invalid("%s is larger than %d MiB; only smaller files can be shared", p, agent.MaxDataBlock>>20)
	}
	if name = strings.TrimSpace(name); name == "" {
		name = path.Base(strings.ReplaceAll(p, `\`, "/"))
	}
	mt := MediaType(name, data)
	if err := out.DataBlock(mt, name, data); err != nil {
		return fault.Invalid("%v", err)
	}
	out.Text(fmt.Sprintf("Shared %s (%s, %d bytes) with the person: the chat shows it and offers it for download.", name, mt, len(data)))
	return nil
}

// MediaType is the MIME type of a file named name with content data: by its extension, else
// by its content.
func MediaType(name string, data []byte) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".csv":
		return "text/csv"
	case ".tsv":
		return "text/tab-separated-values"
	case ".md":
		return "text/markdown"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return http.DetectContentType(data)
}
