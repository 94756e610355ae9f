/*
Copyright 2023 The KEDA Authors

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

type kafkaMetadata struct {
	BootstrapServers []string `keda:"name=bootstrapServers,order=triggerMetadata;resolvedEnv"`
	ConsumerGroup    string   `keda:"name=consumerGroup,order=triggerMetadata;resolvedEnv"`
	Topic            string   `keda:"name=topic,order=triggerMetadata;resolvedEnv,optional"`

	PartitionLimitationStr string  `keda:"name=partitionLimitation,order=triggerMetadata,optional"`
	PartitionLimitation    []int32 // computed in Validate

	LagThreshold           int64 `keda:"name=lagThreshold,order=triggerMetadata,default=10"`
	ActivationLagThreshold int64 `keda:"name=activationLagThreshold,order=triggerMetadata,default=0"`

	OffsetResetPolicy                  offsetResetPolicy `keda:"name=offsetResetPolicy,order=triggerMetadata,default=latest,enum=latest;earliest"`
	AllowIdleConsumers                 bool              `keda:"name=allowIdleConsumers,order=triggerMetadata,default=false"`
	ExcludePersistentLag               bool              `keda:"name=excludePersistentLag,order=triggerMetadata,default=false"`
	ScaleToZeroOnInvalidOffset         bool              `keda:"name=scaleToZeroOnInvalidOffset,order=triggerMetadata,default=false"`
	LimitToPartitionsWithLag           bool              `keda:"name=limitToPartitionsWithLag,order=triggerMetadata,default=false"`
	EnsureEvenDistributionOfPartitions bool              `keda:"name=ensureEvenDistributionOfPartitions,order=triggerMetadata,default=false"`

	VersionStr string `keda:"name=version,order=triggerMetadata,optional"`

	TLS         string `keda:"name=tls,order=triggerMetadata;authParams,default=disable,enum=enable;disable"`
	UnsafeSsl   bool   `keda:"name=unsafeSsl,order=triggerMetadata,default=false"`
	CA          string `keda:"name=ca,order=authParams,optional"`
	Cert        string `keda:"name=cert,order=authParams,optional"`
	Key         string `keda:"name=key,order=authParams,optional"`
	KeyPassword string `keda:"name=keyPassword,order=authParams,optional"`

	Sasl     string `keda:"name=sasl,order=triggerMetadata;authParams,optional,enum=none;plaintext;scram_sha256;scram_sha512;oauthbearer;gssapi"`
	Username string `keda:"name=username,order=authParams,optional"`
	Password string `keda:"name=password,order=authParams,optional"`

	SaslTokenProvider     string `keda:"name=saslTokenProvider,order=triggerMetadata;authParams,optional,enum=bearer;aws_msk_iam"`
	ScopesStr             string `keda:"name=scopes,order=authParams,optional"`
	OAuthTokenEndpointURI string `keda:"name=oauthTokenEndpointUri,order=authParams,optional"`
	OAuthExtensionsStr    string `keda:"name=oauthExtensions,order=authParams,optional"`

	Keytab              string `keda:"name=keytab,order=authParams,optional"`
	Realm               string `keda:"name=realm,order=authParams,optional"`
	KerberosConfigRaw   string `keda:"name=kerberosConfig,order=authParams,optional"`
	KerberosServiceName string `keda:"name=kerberosServiceName,order=authParams,optional"`
	KerberosDisableFAST bool   `keda:"name=kerberosDisableFAST,order=authParams,default=false"`

	AWSRegion string `keda:"name=awsRegion,order=triggerMetadata,optional"`

	version            sarama.KafkaVersion
	saslType           kafkaSaslType
	tokenProvider      kafkaSaslOAuthTokenProvider
	enableTLS          bool
	keytabPath         string
	kerberosConfigPath string
	awsAuthorization   awsutils.AuthorizationMetadata
	scopes             []string
	oauthExtensions    map[string]string

	triggerIndex int
}
