module sluice/apps/kv/porcupine

go 1.21

require github.com/anishathalye/porcupine v1.3.1
