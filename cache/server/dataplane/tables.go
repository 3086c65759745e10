package dataplane

import (
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	"k8s.io/apiserver/pkg/registry/rest"
)

// newTableConvertor returns what renders r's objects as a Table (kubectl
// get): apiextensions' printer-column convertor for declared columns, which
// evaluates each column's JSONPath on the object's content (opaque.Object
// hands it out as runtime.Unstructured), or fallback without columns.
func newTableConvertor(r Resource, fallback rest.TableConvertor) (rest.TableConvertor, error) {
	if len(r.Columns) == 0 {
		return fallback, nil
	}
	return tableconvertor.New(r.Columns)
}
