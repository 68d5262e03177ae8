package wire

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/ops.golden from the code")

// golden is one op's request and response as protocol 1 spells them, every field filled.
type golden struct {
	name           string
	request, reply string
}

func sample[A, R any](op Op[A, R]) golden {
	var a A
	var r R
	fill(reflect.ValueOf(&a).Elem())
	fill(reflect.ValueOf(&r).Elem())
	req, err := op.Request(a)
	if err != nil {
		panic(err)
	}
	reqJSON, _ := json.Marshal(req)
	respJSON, _ := json.Marshal(op.Response(r, nil))
	return golden{name: op.Name, request: string(reqJSON), reply: string(respJSON)}
}

// TestOpsGolden: the JSON of every op's request and response, with every field of its
// arguments and result filled, is what testdata/ops.golden holds. A renamed field, a changed
// tag or a record reaching the wire fails it; a deliberate addition is written with
// `go test ./runner/wire -run TestOpsGolden -update` and reviewed in the diff.
func TestOpsGolden(t *testing.T) {
	cases := []golden{
		sample(Ping), sample(Status), sample(Stats), sample(StartPrepare), sample(Prepare), sample(SetPolicy),
		sample(SetIdlePolicy), sample(SetImageSources), sample(Agent), sample(Act), sample(SetImage),
		sample(ChooseDesktop), sample(VMReady), sample(AgentData), sample(ForgetAgent), sample(StopInstance),
		sample(DeleteData), sample(MarkBusy), sample(MarkIdle), sample(AdminAct), sample(Guest), sample(Tunnel),
		sample(Watch), sample(SelfUpdate), sample(HostShell), sample(HostReadFile), sample(HostWriteFile),
		sample(HostHome), sample(HostInfoOp), sample(Pause), sample(Resume), sample(SetEgress),
		sample(RecordMark), sample(SetRecording), sample(Recordings), sample(Recording), sample(DeleteRecording),
		sample(RecordingShot), sample(Replay),
	}
	if len(cases) != len(Ops) {
		t.Fatalf("%d ops sampled, wire.Ops has %d: add the new op here", len(cases), len(Ops))
	}
	var b strings.Builder
	for i, c := range cases {
		if c.name != Ops[i].Name {
			t.Fatalf("sample %d is %s, wire.Ops[%d] is %s: keep the order of wire.Ops", i, c.name, i, Ops[i].Name)
		}
		fmt.Fprintf(&b, "op %s\n> %s\n< %s\n\n", c.name, c.request, c.reply)
	}
	var ev WatchEvent
	fill(reflect.ValueOf(&ev).Elem())
	evJSON, _ := json.Marshal(ev)
	fmt.Fprintf(&b, "watch event\n< %s\n", evJSON)
	var rm ReplayMessage
	fill(reflect.ValueOf(&rm).Elem())
	rmJSON, _ := json.Marshal(rm)
	fmt.Fprintf(&b, "replay message\n< %s\n", rmJSON)
	got := b.String()
	const path = "testdata/ops.golden"
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("the link's JSON changed at line %d of %s:\n got  %s\n want %s\n(an old runner or server reads the old form; "+
					"if the change is deliberate and compatible, rewrite the file with -update)", i+1, path, g, w)
			}
		}
	}
}

// fill gives every exported field of v a value that is not its zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint8:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}
