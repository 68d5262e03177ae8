// Command cubicle is the Cubicle desktop app, its web server (`cubicle serve`) and its
// command-line tools. All logic lives in backend/cli (the modes) and app (the window).
package main

import (
	"os"

	"cubicle/app"
	"cubicle/backend/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], app.Shell()))
}
