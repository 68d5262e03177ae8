package app

import (
	"encoding/json"
	"fmt"

	"github.com/wailsapp/wails/v2/pkg/menu"
	"github.com/wailsapp/wails/v2/pkg/menu/keys"

	"cubicle/backend/fault"
)

const (
	// eventNavigate is the Wails event that asks the page to show a route (its payload).
	eventNavigate = "navigate"
	// routeLocalVMSettings is the page's route of Settings → Local VM.
	routeLocalVMSettings = "#/settings/local-vm"
)

// editCommand is an Edit menu command for the focused text of the page.
type editCommand string

const (
	editUndo      editCommand = "undo"
	editRedo      editCommand = "redo"
	editCut       editCommand = "cut"
	editCopy      editCommand = "copy"
	editPaste     editCommand = "paste"
	editSelectAll editCommand = "selectAll"
)

// shellActions is what the menu's items do. The desktop build implements it with Wails'
// runtime and the lifecycle context; tests record the calls. Methods may be called from any
// goroutine.
type shellActions interface {
	// Navigate asks the page to show route.
	Navigate(route string)
	// Quit closes the window and ends the app.
	Quit()
	// Edit applies cmd to the page's focused text.
	Edit(cmd editCommand)
}

// applicationMenu builds the menu bar for the platform goos (runtime.GOOS).
//
// The first menu is "Cubicle" (macOS shows it as the application menu) with "Local VM
// settings…" on CmdOrCtrl+, — the platform convention for settings — and Quit. On macOS the
// Edit menu is Wails' role menu, without which Cmd+C/V do nothing in text fields. Elsewhere
// the web view handles the editing keys itself, so the Edit items have no accelerators (an
// accelerator would take Ctrl+C away from the focused field) and act through the page.
func applicationMenu(goos string, act shellActions) *menu.Menu {
	app := menu.NewMenu()
	app.Append(&menu.MenuItem{
		Label:       "Local VM settings…",
		Type:        menu.TextType,
		Accelerator: keys.CmdOrCtrl(","),
		Click:       func(*menu.CallbackData) { act.Navigate(routeLocalVMSettings) },
	})
	app.Append(menu.Separator())
	app.Append(&menu.MenuItem{
		Label:       "Quit Cubicle",
		Type:        menu.TextType,
		Accelerator: keys.CmdOrCtrl("q"),
		Click:       func(*menu.CallbackData) { act.Quit() },
	})

	bar := menu.NewMenu()
	bar.Append(menu.SubMenu("Cubicle", app))
	if goos == "darwin" {
		bar.Append(menu.EditMenu())
		return bar
	}

	edit := menu.NewMenu()
	for _, it := range []struct {
		label string
		cmd   editCommand
	}{
		{"Undo", editUndo},
		{"Redo", editRedo},
		{"", ""},
		{"Cut", editCut},
		{"Copy", editCopy},
		{"Paste", editPaste},
		{"", ""},
		{"Select All", editSelectAll},
	} {
		if it.cmd == "" {
			edit.Append(menu.Separator())
			continue
		}
		cmd := it.cmd
		edit.Append(&menu.MenuItem{
			Label: it.label,
			Type:  menu.TextType,
			Click: func(*menu.CallbackData) { act.Edit(cmd) },
		})
	}
	bar.Append(menu.SubMenu("Edit", edit))
	return bar
}

// selectionJS evaluates to the page's selected text: the selection of the focused input or
// textarea (window.getSelection() does not see inside those), else the document selection.
const selectionJS = `(function(){var e=document.activeElement;` +
	`if(e&&(e.tagName==='INPUT'||e.tagName==='TEXTAREA')&&typeof e.selectionStart==='number'){` +
	`return e.value.substring(e.selectionStart,e.selectionEnd)}` +
	`return String(window.getSelection()||'')})()`

// editScript returns the JavaScript that applies cmd to the page. The page cannot read or
// write the system clipboard itself, so copy and cut hand the selection to Wails' clipboard
// runtime and paste inserts clipboard, the text the shell read from the system clipboard.
func editScript(cmd editCommand, clipboard string) (string, error) {
	switch cmd {
	case editUndo, editRedo, editSelectAll:
		return fmt.Sprintf("document.execCommand(%q)", string(cmd)), nil
	case editCopy:
		return "(function(){var t=" + selectionJS + ";if(t){window.runtime.ClipboardSetText(t)}})()", nil
	case editCut:
		return "(function(){var t=" + selectionJS + ";if(t){window.runtime.ClipboardSetText(t);document.execCommand('delete')}})()", nil
	case editPaste:
		// JSON is a JavaScript string literal; json.Marshal also escapes <, > and &, and
		// U+2028/U+2029, so the text cannot end the script or break the literal.
		lit, err := json.Marshal(clipboard)
		if err != nil {
			return "", fmt.Errorf("edit %s: %w: %w", cmd, fault.ErrInvalid, err)
		}
		return "document.execCommand('insertText',false," + string(lit) + ")", nil
	}
	return "", fault.Invalid("edit: unknown command %q", cmd)
}
