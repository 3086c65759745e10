package dataplane

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NameRule is how object names of a type are validated.
type NameRule string

const (
	// DNSSubdomainNames is upstream's rule for custom resources: a lowercase
	// RFC 1123 subdomain.
	DNSSubdomainNames NameRule = "dns-subdomain"
	// PathSegmentNames accepts anything usable as a URL path segment: not
	// empty, not "." or "..", no "/" or "%". Kubernetes' own RBAC types and
	// kcp's types with the ValidateNameAnnotation use it.
	PathSegmentNames NameRule = "path-segment"
)

// ValidateNameAnnotation on a CRD selects its NameRule; kcp's convention.
const ValidateNameAnnotation = "internal.kcp.io/validate-name"

// Resource declares one served type.
type Resource struct {
	// Group and Resource name the type; Resource is the plural, possibly
	// followed by ":<identity>" (an exported resource of one APIExport).
	Group, Resource string
	// Singular is the singular resource name; Kind and ListKind its kinds.
	Singular, Kind, ListKind string
	// Namespaced types live in namespaces; cluster-scoped otherwise.
	Namespaced bool
	// Versions are the served versions. Each reads and writes the same
	// objects: an object is stored as sent and served under the version the
	// client asked for.
	Versions []string
	// Names is the name rule; DNSSubdomainNames when empty.
	Names NameRule
	// Columns are the printer columns of table output (kubectl get) after
	// the name; none means upstream's default (name and age).
	Columns []apiextensionsv1.CustomResourceColumnDefinition
}

// GroupResource returns the type's group and resource.
func (r Resource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.Group, Resource: r.Resource}
}

// Validate checks that the declaration can be served.
func (r Resource) Validate() error {
	switch {
	case r.Resource == "" || r.Kind == "" || r.ListKind == "" || r.Singular == "":
		return fmt.Errorf("resource %q: resource, singular, kind and list kind must be set", r.GroupResource())
	case len(r.Versions) == 0:
		return fmt.Errorf("resource %q: no served version", r.GroupResource())
	case r.Names != "" && r.Names != DNSSubdomainNames && r.Names != PathSegmentNames:
		return fmt.Errorf("resource %q: unknown name rule %q", r.GroupResource(), r.Names)
	}
	return nil
}

// sameStorage reports whether r and o can share one storage: everything but
// the served versions is equal.
func (r Resource) sameStorage(o Resource) bool {
	r.Versions, o.Versions = nil, nil
	return r.nameRule() == o.nameRule() && r.Group == o.Group && r.Resource == o.Resource &&
		r.Singular == o.Singular && r.Kind == o.Kind && r.ListKind == o.ListKind && r.Namespaced == o.Namespaced
}

func (r Resource) equal(o Resource) bool {
	return r.sameStorage(o) && slices.Equal(r.Versions, o.Versions) && reflect.DeepEqual(r.Columns, o.Columns)
}

func (r Resource) nameRule() NameRule {
	if r.Names == "" {
		return DNSSubdomainNames
	}
	return r.Names
}

// ResourceFromCRD declares what crd describes: its accepted names, its
// served versions, its scope and its name rule.
func ResourceFromCRD(crd *apiextensionsv1.CustomResourceDefinition) Resource {
	names := crd.Status.AcceptedNames
	if names.Plural == "" {
		// Not accepted yet (bootstrapped declarations are served before
		// apiextensions' naming controller has run).
		names = crd.Spec.Names
	}
	r := Resource{
		Group:      crd.Spec.Group,
		Resource:   names.Plural,
		Singular:   names.Singular,
		Kind:       names.Kind,
		ListKind:   names.ListKind,
		Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		Names:      NameRule(crd.Annotations[ValidateNameAnnotation]),
	}
	if r.Names == "" {
		r.Names = DNSSubdomainNames
	}
	if r.Singular == "" {
		r.Singular = strings.ToLower(r.Kind)
	}
	if r.ListKind == "" {
		r.ListKind = r.Kind + "List"
	}
	for _, v := range crd.Spec.Versions {
		if v.Served {
			r.Versions = append(r.Versions, v.Name)
		}
		// One table for every version, as every version serves the same
		// objects: the storage version's columns.
		if v.Storage {
			r.Columns = v.AdditionalPrinterColumns
		}
	}
	return r
}
