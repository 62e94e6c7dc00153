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
CREATE USER IF NOT EXISTS "KINESIS_ORDERS_USER" TYPE = SERVICE RSA_PUBLIC_KEY = 'MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEApxDEFtB52ZMfeIhhyAC4YV5y3t1M90uQz0eSWMTAc/VOBP805BeDIV4lPlgKWlvUOnwguUN++Y4ZdnodQLLVB5iFidnJsVZ8pupG9q3x6V4zVqpqcAPhp5bo/N8ro1MMocoZreE20fbdjkHnc7K88BrmNnBbyE22JkNoNIsUEV/ePD9M8fs076pQDsGdx3/JnDgq4OZ7v8Vd9s8QrFiV6hPKnORgtal1D4lShHw7U/n2GH/HF8paRddZY6xPOH7+QzLv3UNBHiLkzDraPpTkNoG78SiJJ/TjkJJVGcTO6Ao187SviVORJLS94Cdqus9JYn/PLSZfNrweDuumpxLptwIDAQAB' DEFAULT_ROLE = "KINESIS_ORDERS_ROLE" DEFAULT_WAREHOUSE = "KINESIS_WH";

-- 9. service user gets the role [text only on the emulator]
GRANT ROLE "KINESIS_ORDERS_ROLE" TO USER "KINESIS_ORDERS_USER";

-- 10. destination interactive table with a KINESISMETADATA column [text only on the emulator]
CREATE INTERACTIVE TABLE IF NOT EXISTS "ANALYTICS"."RAW"."ORDERS" ("ORDER_ID" NUMBER(38,0), "CUSTOMER" VARCHAR, "AMOUNT" NUMBER(12,2), "KINESISMETADATA" OBJECT) CLUSTER BY ("CUSTOMER", "ORDER_ID");

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
