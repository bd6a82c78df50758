// The components of the Collector the backends tests run: exactly what collector-config/otel-collector.yaml
// uses (receiver otlp; processors memory_limiter, batch; exporters otlp, otlphttp, debug), written out by hand
// as the Collector builder would generate them, with the telemetry factory the service requires.

package main

import (
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/processor/memorylimiterprocessor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// release is the core Collector release every component module below is taken at (go.mod pins them).
const release = "v0.165.0"

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}

	if factories.Extensions, err = otelcol.MakeFactoryMap[extension.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Connectors, err = otelcol.MakeFactoryMap[connector.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Processors, err = otelcol.MakeFactoryMap[processor.Factory](
		memorylimiterprocessor.NewFactory(),
		batchprocessor.NewFactory(),
	); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](
		otlpexporter.NewFactory(),
		otlphttpexporter.NewFactory(),
		debugexporter.NewFactory(),
	); err != nil {
		return otelcol.Factories{}, err
	}

	factories.ReceiverModules = modules(factories.Receivers, map[component.Type]string{
		otlpreceiver.NewFactory().Type(): "receiver/otlpreceiver",
	})
	factories.ProcessorModules = modules(factories.Processors, map[component.Type]string{
		memorylimiterprocessor.NewFactory().Type(): "processor/memorylimiterprocessor",
		batchprocessor.NewFactory().Type():         "processor/batchprocessor",
	})
	factories.ExporterModules = modules(factories.Exporters, map[component.Type]string{
		otlpexporter.NewFactory().Type():     "exporter/otlpexporter",
		otlphttpexporter.NewFactory().Type(): "exporter/otlphttpexporter",
		debugexporter.NewFactory().Type():    "exporter/debugexporter",
	})
	factories.ExtensionModules = map[component.Type]string{}
	factories.ConnectorModules = map[component.Type]string{}
	return factories, nil
}

// modules names each component's Go module as `otelcol components` prints it, for every type the factory map
// holds (a factory's deprecated alias too: otlp for otlp_grpc, otlphttp for otlp_http).
func modules[T component.Factory](factories map[component.Type]T, paths map[component.Type]string) map[component.Type]string {
	out := make(map[component.Type]string, len(factories))
	for typ, factory := range factories {
		out[typ] = "go.opentelemetry.io/collector/" + paths[factory.Type()] + " " + release
	}
	return out
}
