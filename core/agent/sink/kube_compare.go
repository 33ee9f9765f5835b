package sink

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// plain re-decodes obj the way the API machinery decodes objects (int64 and
// float64 numbers), so desired and live objects compare equal.
func plain(obj map[string]any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		// Objects without apiVersion or kind cannot be applied anyway.
		return nil, err
	}
	return u.Object, nil
}

// matches reports whether live holds everything desired says: every field
// of desired equal in live (live may hold more, such as defaults), lists
// element by element, and of metadata only labels and annotations.
func matches(desired, live map[string]any) bool {
	for key, dv := range desired {
		switch key {
		case "status":
			continue
		case "metadata":
			dm, _ := dv.(map[string]any)
			lm, _ := live["metadata"].(map[string]any)
			for _, f := range []string{"labels", "annotations"} {
				if d, ok := dm[f]; ok && !subset(d, lm[f]) {
					return false
				}
			}
			continue
		}
		if !subset(dv, live[key]) {
			return false
		}
	}
	return true
}

func subset(d, l any) bool {
	switch d := d.(type) {
	case map[string]any:
		lm, ok := l.(map[string]any)
		if !ok {
			return len(d) == 0 && l == nil
		}
		for k, v := range d {
			lv, present := lm[k]
			if v == nil {
				if present && lv != nil {
					return false
				}
				continue
			}
			if !present || !subset(v, lv) {
				return false
			}
		}
		return true
	case []any:
		ls, ok := l.([]any)
		if !ok {
			return len(d) == 0 && l == nil
		}
		if len(d) != len(ls) {
			return false
		}
		for i := range d {
			if !subset(d[i], ls[i]) {
				return false
			}
		}
		return true
	case int64:
		switch l := l.(type) {
		case int64:
			return d == l
		case float64:
			return float64(d) == l
		}
		return false
	case float64:
		switch l := l.(type) {
		case int64:
			return d == float64(l)
		case float64:
			return d == l
		}
		return false
	default:
		return d == l
	}
}
