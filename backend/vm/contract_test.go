package vm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
)

// A stored record crosses to the node contract only field by field. These pairs are every
// record the contract has a form of; notOnWire lists the stored fields it leaves out on
// purpose. A field added to a record fails TestStoredFieldsAreDecided until someone decides
// whether the contract carries it.
var contractPairs = []struct {
	stored, wire any
	notOnWire    []string
}{
	{store.NodeSettings{}, nodeapi.NodeSettings{}, nil},
	{store.EngineSettings{}, nodeapi.EngineSettings{}, nil},
	{store.EgressPolicy{}, nodeapi.EgressPolicy{}, nil},
	{store.VMImage{}, nodeapi.Image{}, nil},
	{store.Agent{}, nodeapi.Agent{}, []string{"model"}}, // an agent's model settings and key never leave the server
}

func TestStoredFieldsAreDecided(t *testing.T) {
	for _, p := range contractPairs {
		st, wt := reflect.TypeOf(p.stored), reflect.TypeOf(p.wire)
		onWire := jsonNames(wt)
		for _, name := range jsonNames(st) {
			if !contains(onWire, name) && !contains(p.notOnWire, name) {
				t.Errorf("store.%s has field %q that nodeapi.%s does not: add it to nodeapi.%s and to vm's conversion (contract.go) "+
					"if nodes need it, or to notOnWire in this test if it must not leave the store", st.Name(), name, wt.Name(), wt.Name())
			}
		}
		for _, name := range onWire {
			if !contains(jsonNames(st), name) {
				t.Errorf("nodeapi.%s has field %q that store.%s lacks: say where its value comes from", wt.Name(), name, st.Name())
			}
		}
	}
}

// The conversions copy every field the contract carries: a fully filled record converts to
// a view whose JSON equals the record's without the fields left out.
func TestConversionsCopyEveryField(t *testing.T) {
	var ns store.NodeSettings
	fill(reflect.ValueOf(&ns).Elem())
	sameJSON(t, "NodeSettingsView", ns, NodeSettingsView(ns), nil)

	var img store.VMImage
	fill(reflect.ValueOf(&img).Elem())
	sameJSON(t, "ImageOf", img, ImageOf(img), nil)

	var a store.Agent
	fill(reflect.ValueOf(&a).Elem())
	if a.Model == nil {
		t.Fatal("fill left the agent's model empty")
	}
	v := AgentOf(a)
	sameJSON(t, "AgentOf", a, v, []string{"model"})
	back := StoredAgent(v)
	want := a
	want.Model = nil
	if !reflect.DeepEqual(back, want) {
		t.Errorf("StoredAgent(AgentOf(a)) = %+v, want %+v (the model dropped, nothing else)", back, want)
	}
	raw, _ := json.Marshal(v)
	if strings.Contains(string(raw), "apiKeySealed") || strings.Contains(string(raw), "model") {
		t.Errorf("an agent on the wire carries its model settings: %s", raw)
	}
}

func sameJSON(t *testing.T, what string, stored, view any, leftOut []string) {
	t.Helper()
	var s, v map[string]any
	b, _ := json.Marshal(stored)
	json.Unmarshal(b, &s)
	b, _ = json.Marshal(view)
	json.Unmarshal(b, &v)
	for _, k := range leftOut {
		delete(s, k)
	}
	if !reflect.DeepEqual(s, v) {
		t.Errorf("%s: the view's JSON differs from the record's:\nrecord %v\nview   %v", what, s, v)
	}
}

// jsonNames are the JSON names of t's fields.
func jsonNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fill gives every field of v a value that is not its zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("v-" + v.Type().Name())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
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
