package main
import (
 _ "modernc.org/sqlite"
 _ "github.com/dlclark/regexp2"
 _ "github.com/nikolalohinski/gonja/v2"
 _ "github.com/viterin/vek"
 _ "github.com/ebitengine/purego"
 _ "github.com/openai/openai-go/v3"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "golang.org/x/text/unicode/norm"
)
func main(){}
