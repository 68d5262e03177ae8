package enginetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/engine"
)

// testRegistryIndex pulls from a multi-platform image index by its digest, the way Cubicle
// pins its Debian base (one digest for amd64 and arm64 engines): the engine must pick the
// manifest of the platform asked for and report that architecture. The index is assembled
// through the registry's HTTP API from the test image: its own manifest for this machine's
// architecture, and a copy whose configuration names the other architecture (pulled only,
// never run).
func (s *suite) testRegistryIndex(t *testing.T) {
	addr := StartRegistry(t)
	ctx := testContext(t, 3*time.Minute)
	base, err := s.images.InspectImage(ctx, s.image)
	if err != nil {
		t.Fatal(err)
	}
	name := "cubicle-enginetest/multi"
	repo := addr + "/" + name
	native, other := runtime.GOARCH, "arm64"
	if native == "arm64" {
		other = "amd64"
	}
	ref := repo + ":" + s.run + "-" + native
	if err := s.images.TagImage(ctx, base.ID, ref); err != nil {
		t.Fatalf("TagImage: %v", err)
	}
	if _, err := s.images.PushImage(ctx, ref, engine.PullOptions{Insecure: true}); err != nil {
		t.Fatalf("PushImage: %v", err)
	}
	if err := s.images.RemoveImage(ctx, ref); err != nil {
		t.Fatalf("RemoveImage(pushed tag): %v", err)
	}
	reg := registryClient{base: "http://" + addr + "/v2/" + name}
	nativeMan, mediaType := reg.getManifest(t, ctx, s.run+"-"+native)
	var man struct {
		Config struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
			Size      int64  `json:"size"`
		} `json:"config"`
	}
	if err := json.Unmarshal(nativeMan, &man); err != nil {
		t.Fatalf("manifest: %v: %s", err, nativeMan)
	}
	// The other platform's copy: the same layers under a configuration for the other arch.
	var cfg map[string]any
	if err := json.Unmarshal(reg.getBlob(t, ctx, man.Config.Digest), &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg["architecture"] = other
	newCfg, _ := json.Marshal(cfg)
	newCfgDigest := reg.putBlob(t, ctx, newCfg)
	var manMap map[string]any
	_ = json.Unmarshal(nativeMan, &manMap)
	manMap["config"] = map[string]any{"mediaType": man.Config.MediaType, "digest": newCfgDigest, "size": len(newCfg)}
	otherMan, _ := json.Marshal(manMap)
	otherDigest := reg.putManifest(t, ctx, s.run+"-"+other, mediaType, otherMan)

	indexType := "application/vnd.oci.image.index.v1+json"
	if mediaType == "application/vnd.docker.distribution.manifest.v2+json" {
		indexType = "application/vnd.docker.distribution.manifest.list.v2+json"
	}
	entries := []any{
		map[string]any{"mediaType": mediaType, "digest": digestOf(nativeMan), "size": len(nativeMan),
			"platform": map[string]string{"architecture": native, "os": "linux"}},
		map[string]any{"mediaType": mediaType, "digest": otherDigest, "size": len(otherMan),
			"platform": map[string]string{"architecture": other, "os": "linux"}},
	}
	putIndex := func(tag string, entries []any) string {
		index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": indexType, "manifests": entries})
		return repo + "@" + reg.putManifest(t, ctx, tag, indexType, index)
	}
	pinned := putIndex(s.run+"-index", entries)
	// Docker keeps one image per repo@digest: pulling a second platform of an index it already
	// pulled fails ("Cannot overwrite digest"). Cubicle pulls one platform per engine, so the
	// other platform is asked of a second index with the same entries in the other order.
	pinnedOther := putIndex(s.run+"-index2", []any{entries[1], entries[0]})
	t.Logf("index %s: %s → %s, %s → %s (%s)", pinned, native, digestOf(nativeMan), other, otherDigest, mediaType)

	img, err := s.images.PullImage(ctx, pinned, "linux/"+native, engine.PullOptions{Insecure: true})
	if err != nil {
		t.Fatalf("PullImage(%s, linux/%s): %v", pinned, native, err)
	}
	if img.ID != base.ID || img.Arch != native {
		t.Errorf("pulled %s (arch %q) for linux/%s; want the test image %s", short(img.ID), img.Arch, native, short(base.ID))
	}
	if byDigest, err := s.images.InspectImage(ctx, pinned); err == nil {
		t.Logf("the engine finds the image by the index digest (%s)", short(byDigest.ID))
	} else {
		t.Logf("the engine does not find the image by the index digest (%v); a builder pulls again", err)
	}

	img, err = s.images.PullImage(ctx, pinnedOther, "linux/"+other, engine.PullOptions{Insecure: true})
	if err != nil {
		t.Fatalf("PullImage(%s, linux/%s): %v", pinnedOther, other, err)
	}
	if img.Arch != other || img.ID == base.ID {
		t.Errorf("pulled %s (arch %q) for linux/%s; want the %s copy", short(img.ID), img.Arch, other, other)
	}
	if !slices.ContainsFunc(img.Digests, func(d string) bool { return strings.HasPrefix(d, repo+"@") }) {
		t.Errorf("the pulled image's digests %v name no %s digest", img.Digests, repo)
	}
	if err := s.images.RemoveImage(ctx, img.ID); err != nil {
		t.Errorf("remove the %s copy: %v", other, err)
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// registryClient speaks the distribution API to one repository of a loopback registry.
type registryClient struct{ base string }

func (r registryClient) do(t *testing.T, ctx context.Context, method, u string, body []byte, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return resp
}

func (r registryClient) read(t *testing.T, resp *http.Response, want int) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: HTTP %d: %s", resp.Request.Method, resp.Request.URL, resp.StatusCode, b)
	}
	return b
}

func (r registryClient) getManifest(t *testing.T, ctx context.Context, ref string) (body []byte, mediaType string) {
	t.Helper()
	resp := r.do(t, ctx, http.MethodGet, r.base+"/manifests/"+ref, nil, map[string]string{"Accept": strings.Join([]string{
		"application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"}, ", ")})
	body = r.read(t, resp, http.StatusOK)
	return body, resp.Header.Get("Content-Type")
}

func (r registryClient) getBlob(t *testing.T, ctx context.Context, digest string) []byte {
	t.Helper()
	return r.read(t, r.do(t, ctx, http.MethodGet, r.base+"/blobs/"+digest, nil, nil), http.StatusOK)
}

// putBlob uploads data in one request and returns its digest.
func (r registryClient) putBlob(t *testing.T, ctx context.Context, data []byte) string {
	t.Helper()
	resp := r.do(t, ctx, http.MethodPost, r.base+"/blobs/uploads/", nil, nil)
	r.read(t, resp, http.StatusAccepted)
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	d := digestOf(data)
	q := loc.Query()
	q.Set("digest", d)
	loc.RawQuery = q.Encode()
	r.read(t, r.do(t, ctx, http.MethodPut, loc.String(), data, map[string]string{"Content-Type": "application/octet-stream"}), http.StatusCreated)
	return d
}

// putManifest stores a manifest or index under tag and returns its digest.
func (r registryClient) putManifest(t *testing.T, ctx context.Context, tag, mediaType string, body []byte) string {
	t.Helper()
	resp := r.do(t, ctx, http.MethodPut, r.base+"/manifests/"+url.PathEscape(tag), body, map[string]string{"Content-Type": mediaType})
	r.read(t, resp, http.StatusCreated)
	d := resp.Header.Get("Docker-Content-Digest")
	if d != digestOf(body) {
		t.Fatalf("registry stored manifest %s as %q, want %s", tag, d, digestOf(body))
	}
	return d
}
