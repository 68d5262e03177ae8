package engine

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"cubicle/backend/fault"
)

// RegistryDigest asks the registry named in ref (host[:port]/name[:tag]) for the digest of the
// manifest ref points to, with a HEAD request that needs no credentials. Adapters use it after
// a push when the engine does not report the digest (Podman before 5). insecure selects plain
// HTTP. Registries that require authentication are fault.ErrUnavailable.
func RegistryDigest(ctx context.Context, ref string, insecure bool) (string, error) {
	host, name, tag, err := splitRegistryRef(ref)
	if err != nil {
		return "", err
	}
	scheme := "https"
	if insecure {
		scheme = "http"
	}
	url := fmt.Sprintf("%s://%s/v2/%s/manifests/%s", scheme, host, name, tag)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return "", fault.Invalid("reference %q: %v", ref, err)
	}
	req.Header.Set("Accept", strings.Join([]string{
		"application/vnd.oci.image.manifest.v1+json",
		"application/vnd.docker.distribution.manifest.v2+json",
		"application/vnd.oci.image.index.v1+json",
		"application/vnd.docker.distribution.manifest.list.v2+json",
	}, ", "))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fault.Unavailable("registry %s: %v", host, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("registry %s: HEAD manifest %s:%s: HTTP %d: %w", host, name, tag, resp.StatusCode, ClassForStatus(resp.StatusCode))
	}
	d := resp.Header.Get("Docker-Content-Digest")
	if d == "" {
		return "", fault.Unavailable("registry %s did not report a digest for %s:%s", host, name, tag)
	}
	return d, nil
}

// splitRegistryRef splits "host[:port]/name[:tag]" (the host must be explicit: it contains a
// dot or a port, or is localhost).
func splitRegistryRef(ref string) (host, name, tag string, err error) {
	i := strings.Index(ref, "/")
	if i < 0 {
		return "", "", "", fault.Invalid("reference %q names no registry host", ref)
	}
	host, rest := ref[:i], ref[i+1:]
	if !strings.ContainsAny(host, ".:") && host != "localhost" {
		return "", "", "", fault.Invalid("reference %q names no registry host", ref)
	}
	if at := strings.Index(rest, "@"); at >= 0 {
		return host, rest[:at], rest[at+1:], nil
	}
	name, tag = rest, "latest"
	if c := strings.LastIndex(rest, ":"); c >= 0 {
		name, tag = rest[:c], rest[c+1:]
	}
	return host, name, tag, nil
}
