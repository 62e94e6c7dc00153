-- 1. destination database [runs on the emulator]
CREATE DATABASE IF NOT EXISTS "ANALYTICS";

-- 2. destination schema [runs on the emulator]
CREATE SCHEMA IF NOT EXISTS "ANALYTICS"."RAW";

-- 3. the connector's role [text only on the emulator]
CREATE ROLE IF NOT EXISTS "KINESIS_ORDERS_ROLE";

-- 4. role may use the database [text only on the emulator]
GRANT USAGE ON DATABASE "ANALYTICS" TO ROLE "KINESIS_ORDERS_ROLE";

-- 5. role may use the schema [text only on the emulator]
GRANT USAGE ON SCHEMA "ANALYTICS"."RAW" TO ROLE "KINESIS_ORDERS_ROLE";

-- 6. role may create its support tables and stage [text only on the emulator]
GRANT CREATE TABLE, CREATE STAGE ON SCHEMA "ANALYTICS"."RAW" TO ROLE "KINESIS_ORDERS_ROLE";

-- 7. role may use the warehouse [text only on the emulator]
GRANT USAGE ON WAREHOUSE "KINESIS_WH" TO ROLE "KINESIS_ORDERS_ROLE";

-- 8. the connector's service user, key-pair authentication [text only on the emulator]
CREATE USER IF NOT EXISTS "KINESIS_ORDERS_USER" TYPE = SERVICE RSA_PUBLIC_KEY = '<redacted RSA public key SHA256:he01ahrgHdjM+4BgmMuSJThLo8X77AN5IxAgGJujSUI=>' DEFAULT_ROLE = "KINESIS_ORDERS_ROLE" DEFAULT_WAREHOUSE = "KINESIS_WH";

-- 9. service user gets the role [text only on the emulator]
GRANT ROLE "KINESIS_ORDERS_ROLE" TO USER "KINESIS_ORDERS_USER";

-- 10. destination table with a KINESISMETADATA column [runs on the emulator]
CREATE TABLE IF NOT EXISTS "ANALYTICS"."RAW"."ORDERS" ("ORDER_ID" NUMBER(38,0), "CUSTOMER" VARCHAR, "AMOUNT" NUMBER(12,2), "KINESISMETADATA" OBJECT) ENABLE_SCHEMA_EVOLUTION = TRUE ERROR_LOGGING = TRUE ROW_TIMESTAMP = TRUE;

-- 11. role owns the destination table, which loading and schema evolution need [text only on the emulator]
GRANT OWNERSHIP ON TABLE "ANALYTICS"."RAW"."ORDERS" TO ROLE "KINESIS_ORDERS_ROLE" COPY CURRENT GRANTS;

-- 12. the provider's ledger table [runs on the emulator]
CREATE TABLE IF NOT EXISTS "ANALYTICS"."RAW"."KINESIS_INGEST_LEDGER" (APPLICATION_NAME VARCHAR NOT NULL, GENERATION_ID VARCHAR NOT NULL, SHARD_ID VARCHAR NOT NULL, SEQUENCE_NUMBER VARCHAR NOT NULL, SUB_SEQUENCE_NUMBER NUMBER(20,0) NOT NULL, BATCH_ID VARCHAR NOT NULL, UPDATED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP());

-- 13. the provider's parse-failure table [runs on the emulator]
CREATE TABLE IF NOT EXISTS "ANALYTICS"."RAW"."ORDERS_PARSE_FAILURES" (RECORD_CONTENT_BASE64 VARCHAR, ERROR_MESSAGE VARCHAR, ERROR_COLUMN VARCHAR, KINESISMETADATA OBJECT);

-- 14. the provider's stage [runs on the emulator]
CREATE STAGE IF NOT EXISTS "ANALYTICS"."RAW"."KINESIS_INGEST_STAGE";

-- 15. role reads and moves the ledger [text only on the emulator]
GRANT SELECT, INSERT, UPDATE ON TABLE "ANALYTICS"."RAW"."KINESIS_INGEST_LEDGER" TO ROLE "KINESIS_ORDERS_ROLE";

-- 16. role loads parse failures [text only on the emulator]
GRANT SELECT, INSERT ON TABLE "ANALYTICS"."RAW"."ORDERS_PARSE_FAILURES" TO ROLE "KINESIS_ORDERS_ROLE";

-- 17. role stages its files [text only on the emulator]
GRANT READ, WRITE ON STAGE "ANALYTICS"."RAW"."KINESIS_INGEST_STAGE" TO ROLE "KINESIS_ORDERS_ROLE";
