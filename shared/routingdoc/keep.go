package routingdoc

import "go.yaml.in/yaml/v3"

// RuntimeFields are the provider fields the gateway owns rather than the
// file: the health check's path and method (set through a version, by an
// operator or from what the prober found). KeepRuntimeFields carries them
// into a document that omits them.
var RuntimeFields = []string{"path", "method"}

// KeepRuntimeFields returns doc with the runtime fields (health_check.path
// and .method) of active's providers kept where doc's provider of the same
// name omits them, so that re-importing a file that never had them does
// not drop them; the names of the fields kept ("providers.openai.
// health_check.path"); doc itself when there is nothing to keep. A field
// doc sets, even to another value, wins.
func KeepRuntimeFields(active, doc []byte) ([]byte, []string, error) {
	if len(active) == 0 {
		return doc, nil, nil
	}
	a, err := parseEditable(active)
	if err != nil {
		return doc, nil, nil // nothing to keep from a document that does not parse
	}
	e, err := parseEditable(doc)
	if err != nil {
		return nil, nil, err
	}
	ps := mapGet(e.root, "providers")
	if ps == nil || ps.Kind != yaml.SequenceNode {
		return doc, nil, nil
	}
	var kept []string
	for _, p := range ps.Content {
		name := scalarOf(mapGet(p, "name"))
		ap, err := findProvider(a.root, name)
		if err != nil || p.Kind != yaml.MappingNode {
			continue
		}
		ahc := mapGet(ap, "health_check")
		if ahc == nil || ahc.Kind != yaml.MappingNode {
			continue
		}
		hc := mapGet(p, "health_check")
		for _, f := range RuntimeFields {
			v := mapGet(ahc, f)
			if v == nil || (hc != nil && mapGet(hc, f) != nil) {
				continue
			}
			if hc == nil {
				hc = &yaml.Node{Kind: yaml.MappingNode}
				mapSet(p, "health_check", hc)
			}
			if hc.Kind != yaml.MappingNode {
				break
			}
			mapSet(hc, f, scalar(v.Tag, v.Value))
			kept = append(kept, "providers."+name+".health_check."+f)
		}
	}
	if len(kept) == 0 {
		return doc, nil, nil
	}
	out, err := e.encode()
	return out, kept, err
}
