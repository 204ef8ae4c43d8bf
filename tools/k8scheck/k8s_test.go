package k8scheck

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"switchyard.dev/shared/config"
)

const (
	manifestDir   = "../../deploy/k8s"
	configPath    = "/etc/switchyard/gateway.yaml" // what every container runs with -config
	secretsDir    = "/var/run/secrets/switchyard"  // where the Secret is mounted
	configMapName = "switchyard-config"
	configMapKey  = "gateway.yaml"
	secretName    = "switchyard-secrets"
	namespace     = "switchyard"
	natsURL       = "nats://nats.nats.svc:4222" // the NATS Helm chart's client service
	placeholder   = "REPLACE_ME"
)

// notApplied are the files of deploy/k8s that kustomization.yaml leaves
// out on purpose.
var notApplied = map[string]string{
	"kustomization.yaml":  "kustomize's own file",
	"nats-values.yaml":    "values of the NATS Helm chart, not a manifest",
	"secret.example.yaml": "applied by hand once filled in, never overwritten by kubectl apply -k",
}

// service is one of the three Deployments, with its Service of the same
// name.
type service struct {
	name      string // Deployment and Service
	component string // app.kubernetes.io/component, and part of the image name
	replicas  int32
	listen    func(*config.Config) string
}

var services = []service{
	{"switchyard-proxy", "proxy", 2, func(c *config.Config) string { return c.Proxy.Listen }},
	{"switchyard-prober", "prober", 2, func(c *config.Config) string { return c.Prober.Listen }},
	{"switchyard-admin", "admin", 1, func(c *config.Config) string { return c.Admin.Listen }},
}

// manifests is everything under deploy/k8s, decoded.
type manifests struct {
	kustomization kustomization
	natsValues    map[string]any
	deployments   map[string]*appsv1.Deployment
	services      map[string]*corev1.Service
	configMaps    map[string]*corev1.ConfigMap
	secrets       map[string]*corev1.Secret
	pdbs          map[string]*policyv1.PodDisruptionBudget
	hpas          map[string]*autoscalingv2.HorizontalPodAutoscaler
	// namespaces: the metadata.namespace of every object, by "file#n kind/name"
	namespaces map[string]string
	// applied: whether an object's file is listed in kustomization.yaml
	applied map[string]bool
}

// kustomization is the part of kustomize's Kustomization these manifests
// use (decoded strictly: a field added here must be added to the struct).
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
}

// newObject is the typed API object of apiVersion and kind, nil for a kind
// these manifests should not hold.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	}
	return nil
}

// decodeStrict decodes one YAML document into its typed API object; nil
// for a document of comments only.
func decodeStrict(doc []byte) (any, error) {
	js, err := sigsyaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	obj := newObject(tm.APIVersion, tm.Kind)
	if obj == nil {
		return nil, fmt.Errorf("unknown kind %q of apiVersion %q (want apps/v1 Deployment, v1 Service, v1 ConfigMap, v1 Secret, policy/v1 PodDisruptionBudget or autoscaling/v2 HorizontalPodAutoscaler)", tm.Kind, tm.APIVersion)
	}
	if err := strictJSON(js, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

// strictJSON decodes js into v, failing on a field v's type does not have.
// encoding/json matches field names without regard to case, where the API
// server does not: a field must also come back from a round trip under its
// own spelling.
func strictJSON(js []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the object")
	}
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var in, back any
	if err := json.Unmarshal(js, &in); err != nil {
		return err
	}
	if err := json.Unmarshal(out, &back); err != nil {
		return err
	}
	return sameKeys("", in, back)
}

// sameKeys reports the first non-empty field of in that back lacks.
func sameKeys(at string, in, back any) error {
	switch in := in.(type) {
	case map[string]any:
		b, _ := back.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(in)) {
			p := k
			if at != "" {
				p = at + "." + k
			}
			bv, ok := b[k]
			if !ok {
				if isEmpty(in[k]) {
					continue
				}
				return fmt.Errorf("%s: unknown field (is it spelt with another case?)", p)
			}
			if err := sameKeys(p, in[k], bv); err != nil {
				return err
			}
		}
	case []any:
		b, _ := back.([]any)
		if len(b) != len(in) {
			return fmt.Errorf("%s: %d elements written, %d decoded", at, len(in), len(b))
		}
		for i := range in {
			if err := sameKeys(fmt.Sprintf("%s[%d]", at, i), in[i], b[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	case string:
		return v == ""
	case bool:
		return !v
	case float64:
		return v == 0
	}
	return false
}

// readDocuments splits a multi-document YAML file.
func readDocuments(file string) ([][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// loadManifests decodes every file under deploy/k8s.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		secrets:     map[string]*corev1.Secret{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		namespaces:  map[string]string{},
		applied:     map[string]bool{},
	}

	// kustomization.yaml: its resources exist, and every manifest is
	// either listed or left out on purpose.
	raw, err := os.ReadFile(filepath.Join(manifestDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := sigsyaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if err := strictJSON(js, &m.kustomization); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	k := m.kustomization
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: apiVersion %q kind %q, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	if k.Namespace != namespace {
		t.Errorf("kustomization.yaml: namespace %q, want %q", k.Namespace, namespace)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		if listed[r] {
			t.Errorf("kustomization.yaml: resource %s listed twice", r)
		}
		listed[r] = true
		if _, err := os.Stat(filepath.Join(manifestDir, filepath.FromSlash(r))); err != nil {
			t.Errorf("kustomization.yaml: resource %s: %v", r, err)
		}
		if why, ok := notApplied[r]; ok {
			t.Errorf("kustomization.yaml: resource %s must not be listed (%s)", r, why)
		}
	}

	var files []string
	err = filepath.WalkDir(manifestDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			rel, err := filepath.Rel(manifestDir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		switch file {
		case "kustomization.yaml":
			continue
		case "nats-values.yaml":
			raw, err := os.ReadFile(filepath.Join(manifestDir, file))
			if err != nil {
				t.Fatal(err)
			}
			if err := sigsyaml.Unmarshal(raw, &m.natsValues); err != nil {
				t.Errorf("%s: %v", file, err)
			}
			continue
		}
		_, outside := notApplied[file]
		if !listed[file] && !outside {
			t.Errorf("%s: not listed in kustomization.yaml, so kubectl apply -k never applies it", file)
		}
		docs, err := readDocuments(filepath.Join(manifestDir, filepath.FromSlash(file)))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		for i, doc := range docs {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s, document %d: %v", file, i+1, err)
				continue
			}
			if obj == nil {
				continue
			}
			var meta metav1.ObjectMeta
			var kind string
			switch o := obj.(type) {
			case *appsv1.Deployment:
				meta, kind = o.ObjectMeta, "Deployment"
				m.deployments[o.Name] = o
			case *corev1.Service:
				meta, kind = o.ObjectMeta, "Service"
				m.services[o.Name] = o
			case *corev1.ConfigMap:
				meta, kind = o.ObjectMeta, "ConfigMap"
				m.configMaps[o.Name] = o
			case *corev1.Secret:
				meta, kind = o.ObjectMeta, "Secret"
				m.secrets[o.Name] = o
			case *policyv1.PodDisruptionBudget:
				meta, kind = o.ObjectMeta, "PodDisruptionBudget"
				m.pdbs[o.Name] = o
			case *autoscalingv2.HorizontalPodAutoscaler:
				meta, kind = o.ObjectMeta, "HorizontalPodAutoscaler"
				m.hpas[o.Name] = o
			}
			id := fmt.Sprintf("%s#%d %s/%s", file, i+1, kind, meta.Name)
			if meta.Name == "" {
				t.Errorf("%s: metadata.name is not set", id)
			}
			m.namespaces[id] = meta.Namespace
			m.applied[id] = listed[file]
		}
	}
	return m
}

// TestK8sManifests decodes every manifest strictly and checks that the
// objects fit together.
func TestK8sManifests(t *testing.T) {
	m := loadManifests(t)

	// Namespaces: kustomize sets them on what it applies; what is applied
	// by hand names the same one.
	for id, ns := range m.namespaces {
		switch {
		case m.applied[id] && ns != "" && ns != namespace:
			t.Errorf("%s: namespace %q, kustomization.yaml sets %q", id, ns, namespace)
		case !m.applied[id] && ns != namespace:
			t.Errorf("%s: applied by hand, so metadata.namespace must be %q, got %q", id, namespace, ns)
		}
	}

	for _, s := range services {
		d := m.deployments[s.name]
		if d == nil {
			t.Errorf("no Deployment %s", s.name)
			continue
		}
		checkDeployment(t, m, d, s.component, s.replicas)
		checkService(t, m, s.name, d)
	}
	for name := range m.deployments {
		if !slices.ContainsFunc(services, func(s service) bool { return s.name == name }) {
			t.Errorf("Deployment %s: not one of the services this test knows", name)
		}
	}
	for name := range m.services {
		if m.deployments[name] == nil {
			t.Errorf("Service %s: no Deployment of the same name", name)
		}
	}
	checkProxyScaling(t, m)
	checkSecret(t, m)
	checkNATSValues(t, m)
}

// selects reports whether selector (matchLabels) picks pods with labels;
// an empty selector picks nothing here.
func selects(selector map[string]string, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkDeployment(t *testing.T, m *manifests, d *appsv1.Deployment, component string, replicas int32) {
	t.Helper()
	name := "Deployment " + d.Name
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		got := "unset"
		if d.Spec.Replicas != nil {
			got = strconv.Itoa(int(*d.Spec.Replicas))
		}
		t.Errorf("%s: replicas %s, want %d", name, got, replicas)
	}
	labels := d.Spec.Template.Labels
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchExpressions) > 0 || !selects(d.Spec.Selector.MatchLabels, labels) {
		t.Errorf("%s: spec.selector (matchLabels only) must select the pod template's labels %v", name, labels)
	}
	if labels["app.kubernetes.io/component"] != component {
		t.Errorf("%s: pod label app.kubernetes.io/component %q, want %q", name, labels["app.kubernetes.io/component"], component)
	}
	for other, od := range m.deployments {
		if other != d.Name && d.Spec.Selector != nil && selects(d.Spec.Selector.MatchLabels, od.Spec.Template.Labels) {
			t.Errorf("%s: its selector also selects the pods of %s", name, other)
		}
	}

	pod := d.Spec.Template.Spec
	// With service links on, Kubernetes sets SWITCHYARD_PROXY_PORT and the
	// like for every Service of the namespace, and Switchyard refuses a
	// SWITCHYARD_* variable that names no key (the config load below
	// includes those variables whenever they would be set).
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks must be false (service variables named SWITCHYARD_* stop Switchyard)", name)
	}
	psc := pod.SecurityContext
	if len(pod.Containers) != 1 {
		t.Errorf("%s: %d containers, want 1", name, len(pod.Containers))
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		cname := fmt.Sprintf("%s container %s", name, c.Name)
		sc := c.SecurityContext
		nonRoot := psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		if sc != nil && sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
		if !nonRoot {
			t.Errorf("%s: runAsNonRoot must be true", cname)
		}
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: securityContext.readOnlyRootFilesystem must be true", cname)
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: securityContext.allowPrivilegeEscalation must be false", cname)
		}
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: securityContext.capabilities must drop ALL and add none", cname)
		}
		if sc != nil && sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", cname)
		}
	}
	for _, c := range pod.Containers {
		cname := fmt.Sprintf("%s container %s", name, c.Name)
		if !strings.Contains(c.Image, component) {
			t.Errorf("%s: image %q is not the %s image", cname, c.Image, component)
		}
		if len(c.Command) > 0 {
			t.Errorf("%s: command %q replaces the image's entrypoint (the binary): set args only", cname, c.Command)
		}
		if got := configFlag(c.Args); got != configPath {
			t.Errorf("%s: args %q, want -config %s", cname, c.Args, configPath)
		}
		checkMounts(t, cname, pod, c)
		req, lim := c.Resources.Requests, c.Resources.Limits
		if req.Cpu().IsZero() || req.Memory().IsZero() {
			t.Errorf("%s: resources.requests must set cpu and memory", cname)
		}
		if lim.Memory().IsZero() {
			t.Errorf("%s: resources.limits must set memory", cname)
		}
		for _, p := range []struct {
			kind  string
			probe *corev1.Probe
			path  string
		}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: %s must be an httpGet of %s", cname, p.kind, p.path)
				continue
			}
			g := p.probe.HTTPGet
			if g.Path != p.path {
				t.Errorf("%s: %s path %q, want %s", cname, p.kind, g.Path, p.path)
			}
			if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
				t.Errorf("%s: %s scheme %s, the services serve plain HTTP", cname, p.kind, g.Scheme)
			}
			if port, ok := containerPort(c, g.Port); !ok {
				t.Errorf("%s: %s port %s is not a port of the container", cname, p.kind, g.Port.String())
			} else if want := listenPort(t, m, component); want != 0 && port != want {
				t.Errorf("%s: %s port %d, but the service listens on %d (gateway.yaml)", cname, p.kind, port, want)
			}
		}
	}
}

// configFlag is the value of -config (or --config) in args.
func configFlag(args []string) string {
	for i, a := range args {
		a = strings.TrimPrefix(a, "-")
		if v, ok := strings.CutPrefix(a, "-config="); ok {
			return v
		}
		if v, ok := strings.CutPrefix(a, "config="); ok {
			return v
		}
		if (a == "config" || a == "-config") && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// checkMounts: the ConfigMap's gateway.yaml is at configPath, the whole
// Secret at secretsDir, and both exist among the manifests.
func checkMounts(t *testing.T, cname string, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	var configOK, secretOK bool
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			t.Errorf("%s: volumeMount %s names no volume", cname, vm.Name)
			continue
		}
		if !vm.ReadOnly {
			t.Errorf("%s: volumeMount %s must be readOnly", cname, vm.Name)
		}
		switch {
		case v.ConfigMap != nil && v.ConfigMap.Name == configMapName:
			file := ""
			switch {
			case vm.SubPath != "":
				if vm.MountPath == configPath {
					file = vm.SubPath
				}
			case vm.MountPath == path.Dir(configPath):
				file = path.Base(configPath)
			}
			if file == "" {
				break
			}
			key := file
			if len(v.ConfigMap.Items) > 0 {
				key = ""
				for _, it := range v.ConfigMap.Items {
					if it.Path == file {
						key = it.Key
					}
				}
			}
			if key == configMapKey {
				configOK = true
			}
		case v.Secret != nil && v.Secret.SecretName == secretName && vm.MountPath == secretsDir && vm.SubPath == "":
			if len(v.Secret.Items) > 0 {
				t.Errorf("%s: the Secret volume lists items: mount every key, as gateway.yaml may reference any", cname)
			}
			secretOK = true
		}
	}
	if !configOK {
		t.Errorf("%s: %s is not key %s of ConfigMap %s", cname, configPath, configMapKey, configMapName)
	}
	if !secretOK {
		t.Errorf("%s: Secret %s is not mounted at %s", cname, secretName, secretsDir)
	}
}

// containerPort resolves a probe's or a Service's port (a name or a
// number) to a declared port of c.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP
		}
	}
	return 0, false
}

// listenPort is the port the component listens on per the ConfigMap's
// gateway.yaml (parsed without loading, as the load test is separate), 0
// when it cannot tell.
func listenPort(t *testing.T, m *manifests, component string) int32 {
	t.Helper()
	cm := m.configMaps[configMapName]
	if cm == nil {
		return 0
	}
	var doc map[string]map[string]any
	if err := sigsyaml.Unmarshal([]byte(cm.Data[configMapKey]), &doc); err != nil {
		return 0
	}
	listen, _ := doc[component]["listen"].(string)
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		t.Errorf("ConfigMap %s: %s.listen %q must be set to host:port in a pod (the defaults listen on 127.0.0.1)", configMapName, component, listen)
		return 0
	}
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// checkService: the Service of a Deployment selects its pods (and only
// those) and targets a declared port.
func checkService(t *testing.T, m *manifests, name string, d *appsv1.Deployment) {
	t.Helper()
	svc := m.services[name]
	if svc == nil {
		t.Errorf("no Service %s for Deployment %s", name, d.Name)
		return
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("Service %s: selector %v does not select the pods of Deployment %s (labels %v)", name, svc.Spec.Selector, d.Name, d.Spec.Template.Labels)
	}
	for other, od := range m.deployments {
		if other != d.Name && selects(svc.Spec.Selector, od.Spec.Template.Labels) {
			t.Errorf("Service %s: selector %v also selects the pods of %s", name, svc.Spec.Selector, other)
		}
	}
	if len(svc.Spec.Ports) == 0 {
		t.Errorf("Service %s: no ports", name)
	}
	component := d.Spec.Template.Labels["app.kubernetes.io/component"]
	for _, p := range svc.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		port, ok := containerPort(d.Spec.Template.Spec.Containers[0], target)
		if !ok {
			t.Errorf("Service %s: targetPort %s is not a port of Deployment %s", name, target.String(), d.Name)
			continue
		}
		if want := listenPort(t, m, component); want != 0 && (port != want || p.Port != want) {
			t.Errorf("Service %s: port %d -> %d, want %d -> %d (%s.listen)", name, p.Port, port, want, want, component)
		}
	}
}

// checkProxyScaling: a PodDisruptionBudget and an HPA on CPU for the proxy.
func checkProxyScaling(t *testing.T, m *manifests) {
	t.Helper()
	d := m.deployments["switchyard-proxy"]
	if d == nil {
		return
	}
	labels := d.Spec.Template.Labels
	var pdbs int
	for name, pdb := range m.pdbs {
		sel := pdb.Spec.Selector
		if sel == nil || len(sel.MatchExpressions) > 0 {
			t.Errorf("PodDisruptionBudget %s: selector must use matchLabels only", name)
			continue
		}
		if !selects(sel.MatchLabels, labels) {
			continue
		}
		pdbs++
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.Type != intstr.Int || pdb.Spec.MinAvailable.IntVal != 1 || pdb.Spec.MaxUnavailable != nil {
			t.Errorf("PodDisruptionBudget %s: want minAvailable 1 (and no maxUnavailable)", name)
		}
	}
	if pdbs != 1 {
		t.Errorf("%d PodDisruptionBudgets select the proxy's pods, want 1", pdbs)
	}

	var hpas int
	for name, hpa := range m.hpas {
		ref := hpa.Spec.ScaleTargetRef
		if ref.Name != d.Name {
			t.Errorf("HorizontalPodAutoscaler %s: targets %s %s, not the proxy", name, ref.Kind, ref.Name)
			continue
		}
		hpas++
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
			t.Errorf("HorizontalPodAutoscaler %s: scaleTargetRef %s %s, want apps/v1 Deployment", name, ref.APIVersion, ref.Kind)
		}
		if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 {
			t.Errorf("HorizontalPodAutoscaler %s: minReplicas must be at least 2 (the PodDisruptionBudget keeps 1 through a drain)", name)
		} else if d.Spec.Replicas != nil && *d.Spec.Replicas != *hpa.Spec.MinReplicas {
			t.Errorf("HorizontalPodAutoscaler %s: minReplicas %d, but the Deployment sets replicas %d: re-applying it would fight the HPA", name, *hpa.Spec.MinReplicas, *d.Spec.Replicas)
		}
		if hpa.Spec.MinReplicas != nil && hpa.Spec.MaxReplicas <= *hpa.Spec.MinReplicas {
			t.Errorf("HorizontalPodAutoscaler %s: maxReplicas %d leaves no room above minReplicas", name, hpa.Spec.MaxReplicas)
		}
		cpu := slices.ContainsFunc(hpa.Spec.Metrics, func(ms autoscalingv2.MetricSpec) bool {
			return ms.Type == autoscalingv2.ResourceMetricSourceType && ms.Resource != nil &&
				ms.Resource.Name == corev1.ResourceCPU && ms.Resource.Target.Type == autoscalingv2.UtilizationMetricType &&
				ms.Resource.Target.AverageUtilization != nil && *ms.Resource.Target.AverageUtilization > 0
		})
		if !cpu {
			t.Errorf("HorizontalPodAutoscaler %s: want a Resource metric on cpu with an averageUtilization target", name)
		}
	}
	if hpas != 1 {
		t.Errorf("%d HorizontalPodAutoscalers target the proxy, want 1", hpas)
	}
}

// checkSecret: the example holds placeholders only.
func checkSecret(t *testing.T, m *manifests) {
	t.Helper()
	s := m.secrets[secretName]
	if s == nil {
		t.Errorf("no Secret %s (secret.example.yaml)", secretName)
		return
	}
	if len(s.Data) > 0 {
		t.Errorf("Secret %s: data is set; the example holds stringData placeholders only", secretName)
	}
	if len(s.StringData) == 0 {
		t.Errorf("Secret %s: no stringData", secretName)
	}
	for k, v := range s.StringData {
		if v != placeholder {
			t.Errorf("Secret %s: stringData.%s is not the placeholder %s: never commit a secret", secretName, k, placeholder)
		}
	}
}

// checkNATSValues: the Helm values run JetStream on a 3-server cluster with
// file storage on PVCs, and an account with JetStream for Switchyard's user.
func checkNATSValues(t *testing.T, m *manifests) {
	t.Helper()
	v := m.natsValues
	if v == nil {
		t.Error("nats-values.yaml: missing or empty")
		return
	}
	for key, want := range map[string]any{
		"config.cluster.enabled":                     true,
		"config.cluster.replicas":                    float64(3),
		"config.jetstream.enabled":                   true,
		"config.jetstream.fileStore.enabled":         true,
		"config.jetstream.fileStore.pvc.enabled":     true,
		"config.merge.accounts.SWITCHYARD.jetstream": "enabled",
		"config.merge.system_account":                "SYS",
	} {
		if got := lookup(v, key); got != want {
			t.Errorf("nats-values.yaml: %s is %v, want %v", key, got, want)
		}
	}
	users, _ := lookup(v, "config.merge.accounts.SWITCHYARD.users").([]any)
	if len(users) != 1 {
		t.Errorf("nats-values.yaml: config.merge.accounts.SWITCHYARD.users: want one user")
		return
	}
	u, _ := users[0].(map[string]any)
	if u["user"] != "switchyard" {
		t.Errorf("nats-values.yaml: the SWITCHYARD account's user is %v, want switchyard (nats.user in gateway.yaml)", u["user"])
	}
	if pw, _ := u["password"].(string); !regexp.MustCompile(`^<< \$[A-Z_]+ >>$`).MatchString(pw) {
		t.Errorf("nats-values.yaml: the switchyard user's password must be a variable (<< $NAME >>), set from a Secret")
	}
}

func lookup(v map[string]any, key string) any {
	var cur any = v
	for _, k := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// TestK8sGatewayConfigLoads loads the ConfigMap's gateway.yaml with
// Switchyard's loader, as each Deployment's container would: the Secret's
// keys as files (random values standing in for the placeholders), the
// container's environment, and the service variables Kubernetes would add.
func TestK8sGatewayConfigLoads(t *testing.T) {
	m := loadManifests(t)
	cm, secret := m.configMaps[configMapName], m.secrets[secretName]
	if cm == nil || secret == nil {
		t.Fatalf("ConfigMap %s and Secret %s are needed", configMapName, secretName)
	}
	gateway, ok := cm.Data[configMapKey]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", configMapName, configMapKey)
	}

	dir := t.TempDir()
	secretFiles := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secretFiles, 0o700); err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	for k := range secret.StringData {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		values[k] = hex.EncodeToString(b) // 64 hex digits: a valid encryption key too
		if err := os.WriteFile(filepath.Join(secretFiles, k), []byte(values[k]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Every file: reference names a key of the Secret where it is mounted.
	for _, ref := range regexp.MustCompile(`file:([^\s"',\]}]+)`).FindAllStringSubmatch(gateway, -1) {
		p := ref[1]
		if path.Dir(p) != secretsDir {
			t.Errorf("gateway.yaml: file:%s is not under %s, where the Secret is mounted", p, secretsDir)
		} else if _, ok := values[path.Base(p)]; !ok {
			t.Errorf("gateway.yaml: file:%s: Secret %s has no key %s", p, secretName, path.Base(p))
		}
	}
	local := strings.ReplaceAll(gateway, "file:"+secretsDir+"/", "file:"+filepath.ToSlash(secretFiles)+"/")
	file := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(file, []byte(local), 0o600); err != nil {
		t.Fatal(err)
	}

	var svcs []*corev1.Service
	for _, name := range slices.Sorted(maps.Keys(m.services)) {
		svcs = append(svcs, m.services[name])
	}
	for _, s := range services {
		t.Run(s.component, func(t *testing.T) {
			d := m.deployments[s.name]
			if d == nil {
				t.Skipf("no Deployment %s (TestK8sManifests fails)", s.name)
			}
			pod := d.Spec.Template.Spec
			for _, c := range pod.Containers {
				environ := containerEnv(t, m, c, values)
				if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
					environ = append(environ, serviceLinks(svcs)...)
				}
				cfg, err := config.Load(file, environ)
				if err != nil {
					t.Fatalf("container %s: gateway.yaml does not load:\n%v", c.Name, err)
				}
				if cfg.NATS.Replicas != 3 {
					t.Errorf("nats.replicas %d, want 3", cfg.NATS.Replicas)
				}
				if cfg.NATS.Storage != "file" {
					t.Errorf("nats.storage %q, want file", cfg.NATS.Storage)
				}
				if cfg.NATS.URL != natsURL {
					t.Errorf("nats.url %q, want the NATS chart's service %s", cfg.NATS.URL, natsURL)
				}
				if cfg.NATS.User != "switchyard" || cfg.NATS.PasswordValue.IsZero() {
					t.Errorf("nats: user %q with a password wanted (the SWITCHYARD account of nats-values.yaml)", cfg.NATS.User)
				}
				host, _, err := net.SplitHostPort(s.listen(cfg))
				if err != nil {
					t.Errorf("%s.listen %q: %v", s.component, s.listen(cfg), err)
				} else if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
					t.Errorf("%s.listen %q: loopback is unreachable from the kubelet and the Service", s.component, s.listen(cfg))
				}
				if len(cfg.Skipped) > 0 {
					t.Errorf("providers skipped: %v", cfg.Skipped)
				}
			}
		})
	}
}

// containerEnv is c's environment as the process would see it, secret
// references resolved from values.
func containerEnv(t *testing.T, m *manifests, c corev1.Container, values map[string]string) []string {
	t.Helper()
	if len(c.EnvFrom) > 0 {
		t.Errorf("container %s: envFrom is not modelled by this test: list the variables in env", c.Name)
	}
	var environ []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			environ = append(environ, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := values[ref.Key]
			if ref.Name != secretName || !ok {
				if ref.Optional == nil || !*ref.Optional {
					t.Errorf("container %s: env %s: Secret %s has no key %s", c.Name, e.Name, ref.Name, ref.Key)
				}
				continue
			}
			environ = append(environ, e.Name+"="+v)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := m.configMaps[ref.Name]
			if cm == nil {
				t.Errorf("container %s: env %s: no ConfigMap %s", c.Name, e.Name, ref.Name)
				continue
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				t.Errorf("container %s: env %s: ConfigMap %s has no key %s", c.Name, e.Name, ref.Name, ref.Key)
				continue
			}
			environ = append(environ, e.Name+"="+v)
		default: // fieldRef, resourceFieldRef: a value Kubernetes fills in
			environ = append(environ, e.Name+"=1")
		}
	}
	return environ
}

// serviceLinks are the variables Kubernetes sets for svcs in a pod whose
// enableServiceLinks is not false (the docker links form).
func serviceLinks(svcs []*corev1.Service) []string {
	var env []string
	for _, s := range svcs {
		name := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		const ip = "10.96.0.10"
		for i, p := range s.Spec.Ports {
			proto := string(p.Protocol)
			if proto == "" {
				proto = "TCP"
			}
			port := strconv.Itoa(int(p.Port))
			if i == 0 {
				env = append(env,
					name+"_SERVICE_HOST="+ip,
					name+"_SERVICE_PORT="+port,
					name+"_PORT="+strings.ToLower(proto)+"://"+ip+":"+port)
			}
			if p.Name != "" {
				env = append(env, name+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))+"="+port)
			}
			prefix := name + "_PORT_" + port + "_" + proto
			env = append(env,
				prefix+"="+strings.ToLower(proto)+"://"+ip+":"+port,
				prefix+"_PROTO="+strings.ToLower(proto),
				prefix+"_PORT="+port,
				prefix+"_ADDR="+ip)
		}
	}
	return env
}
