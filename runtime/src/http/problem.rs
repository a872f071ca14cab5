//! Errors as RFC 9457 problem details (`application/problem+json`), and extractors whose
//! rejections are problems too (bad JSON, bad path or query), so every error a client sees has
//! the same shape and names what was wrong.

use super::dto::Problem;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use coolplane_controller::ledger::LedgerError;
use serde::de::DeserializeOwned;

/// An API error.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Problem body.
    pub problem: Box<Problem>,
}

impl ApiError {
    /// A problem with a status, a short title and the detail.
    pub fn new(status: StatusCode, title: &str, detail: impl Into<String>) -> Self {
        let slug = title.to_ascii_lowercase().replace(' ', "-");
        Self {
            status,
            problem: Box::new(Problem {
                type_: format!("https://coolplane.invalid/problems/{slug}"),
                title: title.into(),
                status: status.as_u16(),
                detail: detail.into(),
                field: None,
                domain: None,
            }),
        }
    }
    /// Names the offending field.
    pub fn field(mut self, f: &str) -> Self {
        self.problem.field = Some(f.into());
        self
    }
    /// Names the limiting domain.
    pub fn domain(mut self, d: &str) -> Self {
        self.problem.domain = Some(d.into());
        self
    }
    /// 422 for a field.
    pub fn invalid(field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid field", detail).field(field)
    }
    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not found", detail)
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        let detail = e.to_string();
        match e {
            LedgerError::Invalid { field, .. } => ApiError::invalid(field, detail),
            LedgerError::NotFeasible { domain, .. } => {
                ApiError::new(StatusCode::CONFLICT, "Not feasible", detail).domain(&domain)
            }
            LedgerError::GpusTaken { node, .. } => {
                ApiError::new(StatusCode::CONFLICT, "GPUs taken", detail).domain(&node)
            }
            LedgerError::UnknownLease(_) => ApiError::not_found(detail),
            LedgerError::Full(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "Lease table full", detail),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.problem).unwrap_or_default();
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"coolplane\""),
            );
        }
        r
    }
}

/// A JSON body whose rejection is a problem.
pub struct Body<T>(pub T);

#[axum::async_trait]
impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Body(v)),
            Err(e) => Err(ApiError::new(e.status(), "Bad request body", e.body_text())),
        }
    }
}

/// A path parameter whose rejection is a problem.
pub struct PathParam<T>(pub T);

#[axum::async_trait]
impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParam<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(PathParam(v)),
            Err(e) => Err(ApiError::new(StatusCode::NOT_FOUND, "Not found", e.body_text())),
        }
    }
}

/// A query string whose rejection is a problem.
pub struct QueryParams<T>(pub T);

#[axum::async_trait]
impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(QueryParams(v)),
            Err(e) => Err(ApiError::new(StatusCode::BAD_REQUEST, "Bad query", e.body_text())),
        }
    }
}
