// Package k8scheck holds the test of the Kubernetes manifests in
// deploy/k8s: every document decodes strictly into its Kubernetes API type
// (a misspelt field fails), the Deployments, Services, PodDisruptionBudget
// and HorizontalPodAutoscaler fit together, and the ConfigMap's gateway.yaml
// loads with Switchyard's own configuration loader. It has no code of its
// own.
package k8scheck
