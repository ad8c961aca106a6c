package kubernetes

import (
	"encoding/json"
	"fmt"
)

// writeKubeconfig writes a kubeconfig at path for a component that reaches
// the apiserver at server with cred. JSON is YAML, so the file is written
// with encoding/json, without client-go's types.
func writeKubeconfig(path, server string, cred *credential) error {
	type named struct {
		Name string `json:"name"`
		// Exactly one of these.
		Cluster any `json:"cluster,omitempty"`
		User    any `json:"user,omitempty"`
		Context any `json:"context,omitempty"`
	}
	cfg := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []named{{Name: "cairn", Cluster: map[string]string{
			"server":                server,
			"certificate-authority": cred.CA,
		}}},
		"users": []named{{Name: "cairn", User: map[string]string{
			"client-certificate": cred.Cert,
			"client-key":         cred.Key,
		}}},
		"contexts":        []named{{Name: "cairn", Context: map[string]string{"cluster": "cairn", "user": "cairn"}}},
		"current-context": "cairn",
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("when encoding the kubeconfig %s: %w", path, err)
	}
	return writeFile(path, b, 0o600)
}

// writeJSON writes v as JSON (which Kubernetes' YAML configuration files
// accept) at path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("when encoding %s: %w", path, err)
	}
	return writeFile(path, b, 0o600)
}
