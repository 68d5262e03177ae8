package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Names and annotations the adapter puts on the objects it creates.
const (
	// annLabels holds the spec's labels as given (JSON): Kubernetes label values are
	// limited to 63 characters of [A-Za-z0-9-_.], so a label that does not fit is stored
	// hashed (see labelKey, labelValue) and read back from here.
	annLabels = "cubicle.io/labels"
	// labelContainer names, on a Pod and its ConfigMap, the container record they belong to.
	labelContainer = "cubicle.io/container"
	// dataPod is the ConfigMap key holding the Pod to create at start (JSON).
	dataPod = "pod.json"
	// dataStopTimeout is the ConfigMap key holding the spec's stop timeout in seconds.
	dataStopTimeout = "stop-timeout"
	// containerName is the name of the one container in a desktop's Pod.
	containerName = "desktop"
)

// labelKey returns k as a Kubernetes label key: itself when valid, else a hashed key.
func labelKey(k string) string {
	if len(validation.IsQualifiedName(k)) == 0 {
		return k
	}
	return "cubicle.io/k-" + hash(k, 20)
}

// labelValue returns v as a Kubernetes label value: itself when valid, else a hash.
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	return "h-" + hash(v, 40)
}

func hash(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}

// objectLabels returns the Kubernetes labels and annotations of an object carrying labels
// (managed by Cubicle, see engine.ManagedLabels).
func objectLabels(labels map[string]string) (map[string]string, map[string]string) {
	all := engine.ManagedLabels(labels)
	out := make(map[string]string, len(all))
	for k, v := range all {
		out[labelKey(k)] = labelValue(v)
	}
	raw, _ := json.Marshal(all) // a map of strings always marshals
	return out, map[string]string{annLabels: string(raw)}
}

// decodeLabels returns the labels an object was created with: the annotation when present
// (our objects), else its Kubernetes labels.
func decodeLabels(labels, annotations map[string]string) map[string]string {
	if raw, ok := annotations[annLabels]; ok {
		var out map[string]string
		if json.Unmarshal([]byte(raw), &out) == nil {
			return out
		}
	}
	return maps.Clone(labels)
}

// selector renders engine label filters (see engine.LabelFilters: "" matches any value) as a
// Kubernetes label selector. Results are re-checked with engine.MatchLabels on the decoded
// labels, since hashed values only narrow the search.
func selector(want map[string]string) string {
	parts := make([]string, 0, len(want))
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v := want[k]; v != "" {
			parts = append(parts, labelKey(k)+"="+labelValue(v))
		} else {
			parts = append(parts, labelKey(k))
		}
	}
	return strings.Join(parts, ",")
}

// checkName refuses a name Kubernetes cannot take for a Pod, ConfigMap or claim.
func checkName(what, name string) error {
	if name == "" {
		return fault.Invalid("kubernetes: a %s needs a name", what)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fault.Invalid("kubernetes: %s name %q: %s", what, name, strings.Join(errs, "; "))
	}
	return nil
}
