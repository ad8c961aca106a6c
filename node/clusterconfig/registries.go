package clusterconfig

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"cairn.dev/cairn/proto/api"
)

// ValidateRegistries checks the registry settings of a cluster
// configuration: each registry a host[:port] named once, each mirror an
// http(s) URL of a host alone, and a plain http:// mirror only
// when its host may be reached over plain HTTP. nil is valid: no mirrors.
func ValidateRegistries(r *api.Registries) error {
	for _, h := range r.GetPlainHttp() {
		if err := validateRegistryHost(h); err != nil {
			return fmt.Errorf("plain_http %q: %w", h, err)
		}
	}
	seen := map[string]bool{}
	for _, m := range r.GetMirrors() {
		if err := validateRegistryHost(m.GetRegistry()); err != nil {
			return fmt.Errorf("mirror registry %q: %w", m.GetRegistry(), err)
		}
		if seen[m.GetRegistry()] {
			return fmt.Errorf("mirror registry %q is named twice", m.GetRegistry())
		}
		seen[m.GetRegistry()] = true
		if len(m.GetEndpoints()) == 0 {
			return fmt.Errorf("mirror registry %q has no endpoint", m.GetRegistry())
		}
		for _, e := range m.GetEndpoints() {
			if err := validateMirrorURL(e, r.GetPlainHttp()); err != nil {
				return fmt.Errorf("mirror of %q, endpoint %q: %w", m.GetRegistry(), e, err)
			}
		}
	}
	return nil
}

// validateRegistryHost checks a registry's name as image references carry
// it: a host, or host:port, in lower case.
func validateRegistryHost(h string) error {
	if h == "" {
		return errors.New("empty")
	}
	if strings.ToLower(h) != h {
		return errors.New("not in lower case")
	}
	host := h
	if hh, port, err := net.SplitHostPort(h); err == nil {
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return fmt.Errorf("port %q is not a number", port)
		}
		host = hh
	}
	if host == "" || strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "" {
		return errors.New("not a host name, IPv4 address or host:port")
	}
	return nil
}

// validateMirrorURL checks a mirror's base URL.
func validateMirrorURL(e string, plainHTTP []string) error {
	u, err := url.Parse(e)
	if err != nil {
		return err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("not an http:// or https:// URL")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "":
		return errors.New("not scheme://host[:port]: it carries a path, user information, a query or a fragment")
	}
	if err := validateRegistryHost(u.Host); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if u.Scheme == "http" && !slices.Contains(plainHTTP, u.Host) {
		return fmt.Errorf("plain HTTP, but %s is not among the plain-HTTP hosts", u.Host)
	}
	return nil
}

// DescribeRegistries says what r sets, a line each, for people: cairnctl
// prints it, and workers log it when they apply it.
func DescribeRegistries(r *api.Registries) []string {
	var lines []string
	for _, m := range r.GetMirrors() {
		lines = append(lines, m.GetRegistry()+" mirrored by "+strings.Join(m.GetEndpoints(), ", "))
	}
	if len(r.GetPlainHttp()) > 0 {
		lines = append(lines, "plain HTTP allowed to "+strings.Join(r.GetPlainHttp(), ", "))
	}
	if len(lines) == 0 {
		lines = append(lines, "no mirrors; registries over HTTPS only")
	}
	return lines
}

// ParseMirror parses a mirror as flags give it:
// "REGISTRY=URL[,URL...]", like "docker.io=http://10.42.0.1:5000".
func ParseMirror(s string) (*api.Registries_Mirror, error) {
	reg, urls, ok := strings.Cut(s, "=")
	if !ok || reg == "" || urls == "" {
		return nil, fmt.Errorf("mirror %q is not REGISTRY=URL[,URL...]", s)
	}
	return &api.Registries_Mirror{Registry: reg, Endpoints: strings.Split(urls, ",")}, nil
}
