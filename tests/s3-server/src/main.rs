//! The S3 server the tests and the benchmark start: `s3s-fs` (objects on disk, request
//! signatures checked) with every write of one key taken in turn.
//!
//! `s3s-fs` answers a conditional put (`If-None-Match: *`, `If-Match`) by looking at the key
//! and then writing it, so writers racing to create one key are each told they made it, and
//! the one written last silently replaces the others. Real S3 decides the condition and the
//! write as one step; the commit protocol, the Delta log and the Iceberg versions all rest on
//! that. Here each write (put, multipart completion, copy, delete) holds a lock of its key
//! from the condition's check until the object is in place, which is the same guarantee.

use std::hash::{BuildHasher as _, RandomState};
use std::path::PathBuf;

use clap::Parser;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::auth::SimpleAuth;
use s3s::dto::*;
use s3s::service::S3ServiceBuilder;
use s3s::{S3, S3Request, S3Response, S3Result};
use s3s_fs::FileSystem;
use tokio::sync::{Mutex, MutexGuard};

#[derive(Debug, Parser)]
#[command(version, about = "An S3 server on a directory, for the tests")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long)]
    port: u16,
    /// The access key every request must be signed with.
    #[arg(long)]
    access_key: String,
    #[arg(long)]
    secret_key: String,
    /// The directory holding the buckets, one folder each.
    root: PathBuf,
}

/// How many locks the keys share: two keys on one lock only wait for each other.
const STRIPES: usize = 256;

struct Serialized {
    fs: FileSystem,
    locks: Vec<Mutex<()>>,
    hasher: RandomState,
}

impl Serialized {
    fn new(fs: FileSystem) -> Serialized {
        Serialized {
            fs,
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: RandomState::new(),
        }
    }

    /// The lock of `bucket/key`, held while one write of it checks and lands.
    async fn lock(&self, bucket: &str, key: &str) -> MutexGuard<'_, ()> {
        let stripe = self.hasher.hash_one((bucket, key)) as usize % STRIPES;
        self.locks[stripe].lock().await
    }
}

/// The S3 API as `s3s-fs` serves it: `serialized` methods write one key and run under its
/// lock, `passed` ones run as they are. (One macro makes the whole impl, so that
/// `async_trait` sees the methods it rewrites.)
macro_rules! served {
    (
        serialized: { $($write:ident: $win:ident -> $wout:ident),+ $(,)? }
        passed: { $($method:ident: $input:ident -> $output:ident),+ $(,)? }
    ) => {
        #[async_trait::async_trait]
        impl S3 for Serialized {
            $(
                async fn $write(&self, req: S3Request<$win>) -> S3Result<S3Response<$wout>> {
                    let _turn = self.lock(&req.input.bucket, &req.input.key).await;
                    self.fs.$write(req).await
                }
            )+
            $(
                async fn $method(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    self.fs.$method(req).await
                }
            )+
        }
    };
}

served! {
    serialized: {
        put_object: PutObjectInput -> PutObjectOutput,
        complete_multipart_upload: CompleteMultipartUploadInput -> CompleteMultipartUploadOutput,
        copy_object: CopyObjectInput -> CopyObjectOutput,
        delete_object: DeleteObjectInput -> DeleteObjectOutput,
    }
    passed: {
        create_bucket: CreateBucketInput -> CreateBucketOutput,
        delete_bucket: DeleteBucketInput -> DeleteBucketOutput,
        delete_objects: DeleteObjectsInput -> DeleteObjectsOutput,
        get_bucket_location: GetBucketLocationInput -> GetBucketLocationOutput,
        get_object: GetObjectInput -> GetObjectOutput,
        head_bucket: HeadBucketInput -> HeadBucketOutput,
        head_object: HeadObjectInput -> HeadObjectOutput,
        list_buckets: ListBucketsInput -> ListBucketsOutput,
        list_objects: ListObjectsInput -> ListObjectsOutput,
        list_objects_v2: ListObjectsV2Input -> ListObjectsV2Output,
        create_multipart_upload: CreateMultipartUploadInput -> CreateMultipartUploadOutput,
        upload_part: UploadPartInput -> UploadPartOutput,
        upload_part_copy: UploadPartCopyInput -> UploadPartCopyOutput,
        list_parts: ListPartsInput -> ListPartsOutput,
        abort_multipart_upload: AbortMultipartUploadInput -> AbortMultipartUploadOutput,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let fs = FileSystem::new(&args.root).map_err(|e| format!("{}: {e:?}", args.root.display()))?;
    let service = {
        let mut builder = S3ServiceBuilder::new(Serialized::new(fs));
        builder.set_auth(SimpleAuth::from_single(args.access_key, args.secret_key));
        builder.build()
    };
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    eprintln!(
        "serving {} on http://{}",
        args.root.display(),
        listener.local_addr()?
    );
    let http = Builder::new(TokioExecutor::new());
    loop {
        let (socket, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("accept: {e}");
                continue;
            }
        };
        let connection = http
            .serve_connection(TokioIo::new(socket), service.clone())
            .into_owned();
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
}
