package app

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wailsInfo reads wails.json: the program name and the "info" block the platform assets
// must agree with.
func wailsInfo(t *testing.T) (name string, info map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "wails.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Output string            `json:"outputfilename"`
		Info   map[string]string `json:"info"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p.Output, p.Info
}

// readPlist reads the top-level dict of a property list: string values as they are, <true/>
// and <false/> as "true" and "false", nested dicts as "dict".
func readPlist(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	dec.Strict = true
	out := map[string]string{}
	depth, key := 0, ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local == "dict" {
				depth++
				if depth == 2 && key != "" {
					out[key], key = "dict", ""
				}
				continue
			}
			if depth != 1 {
				continue
			}
			switch el.Name.Local {
			case "key":
				var k string
				if err := dec.DecodeElement(&k, &el); err != nil {
					return nil, err
				}
				if _, dup := out[k]; dup {
					return nil, fmt.Errorf("key %s repeated", k)
				}
				key = k
			case "string":
				var v string
				if err := dec.DecodeElement(&v, &el); err != nil {
					return nil, err
				}
				out[key], key = v, ""
			case "true", "false":
				out[key], key = el.Name.Local, ""
			}
		case xml.EndElement:
			if el.Name.Local == "dict" {
				depth--
			}
		}
	}
}

// TestMacOSInfoPlist checks the bundle's Info.plist files (Wails reads Info.plist for
// `wails build`, Info.dev.plist for `wails dev`): the executable and icon the bundle has,
// the version of wails.json, and the usage descriptions macOS shows before it lets the app
// capture the screen or drive input for host desktop tools.
func TestMacOSInfoPlist(t *testing.T) {
	name, info := wailsInfo(t)
	for _, file := range []string{"Info.plist", "Info.dev.plist"} {
		t.Run(file, func(t *testing.T) {
			p, err := readPlist(filepath.Join("..", "build", "darwin", file))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"CFBundlePackageType":        "APPL",
				"CFBundleExecutable":         name,
				"CFBundleName":               info["productName"],
				"CFBundleShortVersionString": info["productVersion"],
				"CFBundleVersion":            info["productVersion"],
				"CFBundleIconFile":           "iconfile", // build/darwin/iconfile.icns, Wails' name too
				"NSHighResolutionCapable":    "true",
				"NSAppTransportSecurity":     "dict",
			}
			for k, v := range want {
				if p[k] != v {
					t.Errorf("%s = %q, want %q", k, p[k], v)
				}
			}
			for _, k := range []string{"CFBundleIdentifier", "LSMinimumSystemVersion", "NSScreenCaptureUsageDescription", "NSAccessibilityUsageDescription", "NSAppleEventsUsageDescription"} {
				if len(p[k]) < 4 {
					t.Errorf("%s is missing or empty", k)
				}
			}
			if strings.Contains(p["CFBundleIdentifier"], "wails") {
				t.Errorf("CFBundleIdentifier %q is Wails' template default", p["CFBundleIdentifier"])
			}
		})
	}
}

// TestWindowsAssets checks the Windows resources: the version resource and manifest carry
// wails.json's version, the manifest asks for per-monitor DPI awareness and common controls
// v6, and the installer script takes the binary from the command line and uses the icon.
func TestWindowsAssets(t *testing.T) {
	_, info := wailsInfo(t)
	b, err := os.ReadFile(filepath.Join("..", "build", "windows", "info.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vi struct {
		Fixed map[string]string            `json:"fixed"`
		Info  map[string]map[string]string `json:"info"`
	}
	if err := json.Unmarshal(b, &vi); err != nil {
		t.Fatalf("info.json: %v", err)
	}
	if vi.Fixed["file_version"] != info["productVersion"] || vi.Info["0000"]["ProductVersion"] != info["productVersion"] ||
		vi.Info["0000"]["ProductName"] != info["productName"] || vi.Info["0000"]["CompanyName"] != info["companyName"] {
		t.Errorf("info.json %+v does not match wails.json %+v", vi, info)
	}

	b, err = os.ReadFile(filepath.Join("..", "build", "windows", "wails.exe.manifest"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Identity struct {
			Name    string `xml:"name,attr"`
			Version string `xml:"version,attr"`
		} `xml:"assemblyIdentity"`
		Deps []struct {
			Identity struct {
				Name    string `xml:"name,attr"`
				Version string `xml:"version,attr"`
			} `xml:"dependentAssembly>assemblyIdentity"`
		} `xml:"dependency"`
		Settings struct {
			Awareness string `xml:"dpiAwareness"`
		} `xml:"application>windowsSettings"`
	}
	if err := xml.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if m.Identity.Version != info["productVersion"]+".0" {
		t.Errorf("manifest version %q, want %s.0", m.Identity.Version, info["productVersion"])
	}
	if len(m.Deps) == 0 || m.Deps[0].Identity.Name != "Microsoft.Windows.Common-Controls" || m.Deps[0].Identity.Version != "6.0.0.0" {
		t.Errorf("manifest dependencies %+v, want common controls 6", m.Deps)
	}
	if !strings.HasPrefix(m.Settings.Awareness, "permonitorv2") {
		t.Errorf("dpiAwareness %q, want permonitorv2", m.Settings.Awareness)
	}
	if strings.Contains(string(b), "{{") {
		t.Error("the manifest still holds template markers")
	}

	nsi, err := os.ReadFile(filepath.Join("..", "build", "windows", "installer", "project.nsi"))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := os.ReadFile(filepath.Join("..", "build", "windows", "installer", "wails_tools.nsh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`!include "wails_tools.nsh"`, `"..\icon.ico"`, "wails.files", "wails.writeUninstaller", "cubicle.webview2check"} {
		if !strings.Contains(string(nsi), want) {
			t.Errorf("project.nsi lacks %s", want)
		}
	}
	if strings.Contains(string(nsi), "MicrosoftEdgeWebview2Setup.exe") || strings.Contains(string(nsi), "RMDir /r $INSTDIR") {
		t.Error("project.nsi embeds a downloaded bootstrapper or removes the install folder recursively")
	}
	if !strings.Contains(string(tools), `!define INFO_PRODUCTVERSION "`+info["productVersion"]+`"`) || strings.Contains(string(tools), "{{") {
		t.Errorf("wails_tools.nsh is not rendered with version %s", info["productVersion"])
	}
}
