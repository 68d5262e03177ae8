package engine

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"cubicle/backend/fault"
)

// ManagedLabels returns a copy of labels with LabelManaged set to "true": every object an
// adapter creates carries it, so that a restart can find (and only touch) its own objects.
func ManagedLabels(labels map[string]string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	maps.Copy(out, labels)
	out[LabelManaged] = "true"
	return out
}

// LabelFilters renders a label selector as the engines' "label" filter values ("key=value",
// or "key" alone for an empty value, which matches any value), sorted so requests are
// reproducible. Engines AND the values together.
func LabelFilters(labels map[string]string) []string {
	out := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if v := labels[k]; v != "" {
			out = append(out, k+"="+v)
		} else {
			out = append(out, k)
		}
	}
	return out
}

// MatchLabels reports whether have satisfies the selector want with the semantics of
// LabelFilters: every key present, and equal where want gives a value. Adapters use it to
// re-check engine results, since older services ignore some filters.
func MatchLabels(have, want map[string]string) bool {
	for k, v := range want {
		got, ok := have[k]
		if !ok || (v != "" && got != v) {
			return false
		}
	}
	return true
}

// NormalizeCaps upper-cases capability names and adds the CAP_ prefix where missing
// ("sys_admin" → "CAP_SYS_ADMIN"), dropping duplicates, so both engines get the same names.
func NormalizeCaps(caps []string) []string {
	var out []string
	for _, c := range caps {
		c = strings.ToUpper(strings.TrimSpace(c))
		if c == "" {
			continue
		}
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// LabelChanges renders labels as Containerfile LABEL instructions (for an image import),
// sorted by key. Keys with spaces, quotes or '=' are fault.ErrInvalid.
func LabelChanges(labels map[string]string) ([]string, error) {
	out := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k == "" || strings.ContainsAny(k, " \t\n=\"'\\") {
			return nil, fault.Invalid("label key %q: no spaces, quotes or '='", k)
		}
		out = append(out, "LABEL "+k+"="+strconv.Quote(labels[k]))
	}
	return out, nil
}
