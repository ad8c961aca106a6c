package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
)

// watchTimeout is how long one watch request lasts before the apiserver
// ends it and follow starts the next from where it was.
const watchTimeout = 5 * time.Minute

// objectMeta is the part of every object's metadata follow keys it by.
type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
}

// followed is what follow keeps of each item of a collection: it tells its
// metadata, so that one decoding of the item gives both the object and
// its key.
type followed interface{ meta() objectMeta }

// The objects Cairn follows.
func (s service) meta() objectMeta          { return s.Metadata }
func (e endpointSlice) meta() objectMeta    { return e.Metadata }
func (n kubeNode) meta() objectMeta         { return n.Metadata }
func (np networkPolicy) meta() objectMeta   { return np.Metadata }
func (p policyPod) meta() objectMeta        { return p.Metadata }
func (n kubeNamespace) meta() objectMeta    { return n.Metadata }
func (c claim) meta() objectMeta            { return c.Metadata.objectMeta }
func (v persistentVolume) meta() objectMeta { return v.Metadata.objectMeta }

// errExpired is a watch whose resource version the apiserver no longer
// has (410 Gone): follow lists again.
var errExpired = errors.New("watch expired")

// healthyAfter wraps changed so that the runnable of ctx signals Healthy
// once changed first succeeds, not before: a follower whose apiserver is
// away fails at once, and must keep its restart backoff growing instead
// of resetting it with every restart.
func healthyAfter[T any](ctx context.Context, changed func(map[string]T) error) func(map[string]T) error {
	healthy := false
	return func(objects map[string]T) error {
		if err := changed(objects); err != nil {
			return err
		}
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
		return nil
	}
}

// follow keeps the objects of a collection (path: its REST path, such as
// /api/v1/services) and calls changed with all of them, keyed by
// namespace/name, after the first list and after every change the
// apiserver's watch reports. T decodes one object; changed must not keep
// the map. It returns when ctx ends, the apiserver fails, or changed
// returns an error.
func follow[T followed](ctx context.Context, c *apiClient, path string, changed func(map[string]T) error) error {
	for {
		objects, version, err := list[T](ctx, c, path)
		if err != nil {
			return err
		}
		if err := changed(objects); err != nil {
			return err
		}
		for {
			start := time.Now()
			version, err = watch(ctx, c, path, version, objects, changed)
			if errors.Is(err, errExpired) {
				break
			}
			if err != nil {
				return err
			}
			// A watch that ends at once is not asked again at once.
			if time.Since(start) < time.Second {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// list reads the whole collection at path and its resource version.
func list[T followed](ctx context.Context, c *apiClient, path string) (map[string]T, string, error) {
	var answer struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := c.get(ctx, path, &answer); err != nil {
		return nil, "", err
	}
	objects := make(map[string]T, len(answer.Items))
	for _, raw := range answer.Items {
		key, obj, err := decodeObject[T](raw)
		if err != nil {
			return nil, "", fmt.Errorf("when reading %s: %w", path, err)
		}
		objects[key] = obj
	}
	return objects, answer.Metadata.ResourceVersion, nil
}

// decodeObject decodes raw as T and returns it with its key.
func decodeObject[T followed](raw json.RawMessage) (string, T, error) {
	var obj T
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", obj, err
	}
	m := obj.meta()
	return m.Namespace + "/" + m.Name, obj, nil
}

// watch applies to objects the changes to path after version, calling
// changed after each, until the apiserver ends the watch (nil error) or
// ctx ends. It returns the last version seen.
func watch[T followed](ctx context.Context, c *apiClient, path, version string, objects map[string]T, changed func(map[string]T) error) (string, error) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	url := fmt.Sprintf("%s%s%swatch=true&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%d",
		c.server, path, sep, version, int(watchTimeout.Seconds()))
	// A connection that dies without a word ends with this deadline.
	wctx, cancel := context.WithTimeout(ctx, watchTimeout+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(wctx, http.MethodGet, url, nil)
	if err != nil {
		return version, fmt.Errorf("when building the watch of %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	// The client's own timeout would cut the stream: the apiserver ends
	// it after watchTimeout.
	client := *c.http
	client.Timeout = 0
	res, err := client.Do(req)
	if err != nil {
		return version, fmt.Errorf("when watching %s: %w", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusGone {
		return version, errExpired
	}
	if res.StatusCode != http.StatusOK {
		return version, fmt.Errorf("when watching %s: %w", path, &statusError{Code: res.StatusCode, Message: res.Status})
	}
	dec := json.NewDecoder(res.Body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return version, ctx.Err()
			}
			// The apiserver ended the watch, or the connection broke:
			// either way the next watch goes on from version.
			return version, nil
		}
		switch ev.Type {
		case "ERROR":
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone {
				return version, errExpired
			}
			return version, fmt.Errorf("when watching %s: %w", path, &statusError{Code: st.Code, Message: st.Message})
		case "ADDED", "MODIFIED", "DELETED", "BOOKMARK":
		default:
			return version, fmt.Errorf("when watching %s: unknown event %q", path, ev.Type)
		}
		// A bookmark's object is a T with only its metadata.
		key, obj, err := decodeObject[T](ev.Object)
		if err != nil {
			return version, fmt.Errorf("when reading a watch event of %s: %w", path, err)
		}
		version = obj.meta().ResourceVersion
		if ev.Type == "BOOKMARK" {
			continue
		}
		if ev.Type == "DELETED" {
			delete(objects, key)
		} else {
			objects[key] = obj
		}
		if err := changed(objects); err != nil {
			return version, err
		}
	}
}
