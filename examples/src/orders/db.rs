//! The orders database: the demo's schema in PostgreSQL, with the orders and the receipts sent.

use std::sync::Arc;

use rerun_core::Error;

use super::OrderCreated;
use crate::AppError;

/// A connection to the orders database, in the demo's own schema.
#[derive(Clone)]
pub struct Db {
    client: Arc<tokio_postgres::Client>,
    schema: String,
}

fn db_error(e: tokio_postgres::Error) -> Error {
    Error::store_msg(None, format!("the orders database: {e}"))
}

impl Db {
    /// Connects to `url` and creates `schema` with its tables.
    pub async fn create(url: &str, schema: &str) -> Result<Db, AppError> {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| AppError::Service(format!("connecting to PostgreSQL at {url}: {e}")))?;
        tokio::spawn(conn);
        let db = Db {
            client: Arc::new(client),
            schema: schema.to_owned(),
        };
        let created = db
            .client
            .batch_execute(&format!(
                "CREATE SCHEMA {schema};
                 CREATE TABLE {schema}.orders (
                     order_id text PRIMARY KEY, customer text NOT NULL, cents bigint NOT NULL);
                 CREATE TABLE {schema}.receipts (
                     order_id text NOT NULL, customer text NOT NULL, cents bigint NOT NULL);"
            ))
            .await;
        if let Err(e) = created {
            db.drop_schema().await;
            return Err(AppError::Service(format!("creating the tables: {e}")));
        }
        Ok(db)
    }

    /// Writes the order; a second write of the same order changes nothing.
    pub async fn insert_order(&self, order: &OrderCreated) -> Result<(), Error> {
        self.client
            .execute(
                &format!(
                    "INSERT INTO {}.orders (order_id, customer, cents) VALUES ($1, $2, $3)
                     ON CONFLICT DO NOTHING",
                    self.schema
                ),
                &[&order.order_id, &order.customer, &order.cents],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// "Sends" the receipt: the mail provider of a real shop, a row here.
    pub async fn send_receipt(&self, order: &OrderCreated) -> Result<(), Error> {
        self.client
            .execute(
                &format!(
                    "INSERT INTO {}.receipts (order_id, customer, cents) VALUES ($1, $2, $3)",
                    self.schema
                ),
                &[&order.order_id, &order.customer, &order.cents],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// The number of receipts sent for `order_id`.
    pub async fn receipts_for(&self, order_id: &str) -> Result<i64, Error> {
        let row = self
            .client
            .query_one(
                &format!(
                    "SELECT count(*) FROM {}.receipts WHERE order_id = $1",
                    self.schema
                ),
                &[&order_id],
            )
            .await
            .map_err(db_error)?;
        Ok(row.get(0))
    }

    /// Every order with the number of receipts sent for it, by order id.
    pub async fn orders_with_receipts(&self) -> Result<Vec<(String, String, i64, i64)>, AppError> {
        let s = &self.schema;
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT o.order_id, o.customer, o.cents,
                            (SELECT count(*) FROM {s}.receipts r WHERE r.order_id = o.order_id)
                     FROM {s}.orders o ORDER BY o.order_id"
                ),
                &[],
            )
            .await
            .map_err(|e| AppError::Service(format!("reading the orders: {e}")))?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }

    /// Drops the schema with everything in it: the tables, and rerun's store tables, meta table
    /// and fence sequence when the store is PostgreSQL.
    pub async fn drop_schema(&self) {
        let _ = self
            .client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await;
    }
}
